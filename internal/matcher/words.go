package matcher

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"reconcile"
)

// The words findings use: nouns for movements and obligations, counts,
// durations and times for people, and exact money.

func (m *matcher) money(mv int32) reconcile.Money { return m.obj(m.movs[mv].rep).Money }

func (m *matcher) created(mv int32) time.Time { return m.obj(m.movs[mv].rep).Created }

func (m *matcher) sortMovs(movs []int32) {
	if len(movs) > 1 {
		slices.SortFunc(movs, func(a, b int32) int { return strings.Compare(m.movID(a), m.movID(b)) })
	}
}

// ids appends the ids of the members of movement mv that have status
// want, or of every member when want is empty.
func (m *matcher) ids(dst []string, mv int32, want reconcile.Status) []string {
	for j := m.movs[mv].first; j >= 0; j = m.next[j] {
		if want == "" || m.obj(j).Status == want {
			dst = append(dst, m.obj(j).ID)
		}
	}
	return dst
}

// movIDs are the movements' own ids (an intent's group by its intent), for
// sentences.
func (m *matcher) movIDs(movs []int32) string {
	s := make([]string, len(movs))
	for k, mv := range movs {
		s[k] = m.movID(mv)
	}
	return strings.Join(s, ", ")
}

// movNoun names a movement's kind for people: an intent with its charges
// is a payment.
func (m *matcher) movNoun(mv int32) string {
	r := m.movs[mv].ref
	if r < 0 {
		return "payment"
	}
	switch m.obj(r).Kind {
	case reconcile.PaymentIntent:
		return "payment"
	case reconcile.Charge:
		return "charge"
	case reconcile.Refund:
		return "refund"
	}
	return "record"
}

// targetNoun names what a refund refunds; an id that was not read is
// named by its provider prefix.
func (m *matcher) targetNoun(id string) string {
	if mv := m.movementOf(id); mv >= 0 {
		return m.movNoun(mv)
	}
	if strings.HasPrefix(id, "ch_") || strings.HasPrefix(id, "py_") {
		return "charge"
	}
	return "payment"
}

// oblWords are the words a sentence about an obligation of kind k uses.
func oblWords(k reconcile.ObjectKind) (noun, verb, loss string) {
	if k == reconcile.Refund {
		return "Refund", "paid out", "left the account"
	}
	if kindClass(k) == clsCharge {
		return "Charge", "collected", "was taken from the customer"
	}
	return "Obligation", "moved", "moved"
}

func count(n int) string {
	if n >= 2 && n <= 9 {
		return []string{"two", "three", "four", "five", "six", "seven", "eight", "nine"}[n-2]
	}
	return fmt.Sprint(n)
}

func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	case 3:
		return "three times"
	}
	return fmt.Sprintf("%d times", n)
}

// human formats a duration the way a person says it.
func human(d time.Duration) string {
	d = absDur(d)
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case d < time.Minute:
		return unit(int64(d/time.Second), "second")
	case d < 2*time.Hour:
		return unit(int64(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int64(d/time.Hour), "hour")
	}
	return unit(int64(d/(24*time.Hour)), "day")
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sameCurrency compares ISO currency codes as docs/design.md ("Linking") says: without regard
// to case (a team's table may say USD where Stripe says usd).
func sameCurrency(a, b string) bool { return a == b || strings.EqualFold(a, b) }

// lowerMoney is money with its currency in lower case, for keys.
func lowerMoney(m reconcile.Money) reconcile.Money {
	m.Currency = strings.ToLower(m.Currency)
	return m
}

// sameMoney reports whether a and b are the same amount of the same
// currency.
func sameMoney(a, b reconcile.Money) bool {
	return a.Amount == b.Amount && sameCurrency(a.Currency, b.Currency)
}

// sum is money added up exactly in minor units, or, past what an int64
// holds, its bound and the fact that it was reached: a figure at risk is
// said to be at least that, never wrapped around.
type sum struct {
	v    int64
	over bool // the true figure lies beyond v (v is MaxInt64 or MinInt64)
}

func (s sum) add(b int64) sum {
	r := s.v + b
	switch {
	case b > 0 && r < s.v:
		return sum{v: math.MaxInt64, over: true}
	case b < 0 && r > s.v:
		return sum{v: math.MinInt64, over: true}
	}
	return sum{v: r, over: s.over}
}

// or keeps s's figure and adds t's mark of having reached a bound.
func (s sum) or(t sum) sum { s.over = s.over || t.over; return s }

// text formats the sum as money of currency, "at least …" when it
// reached a bound.
func (s sum) text(currency string) string {
	m := reconcile.Money{Amount: s.v, Currency: currency}.String()
	if s.over {
		return "at least " + m
	}
	return m
}
