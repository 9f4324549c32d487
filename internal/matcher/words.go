package matcher

import (
	"math"
	"slices"
	"strings"
	"time"

	"reconcile"
)

// What a finding's sentence names (reconcile.Mention: a movement's id,
// noun and money), and exact money; the sentences themselves are
// reconcile's Detail functions, beside the kinds table.

func (m *matcher) money(mv int32) reconcile.Money { return m.obj(m.movs[mv].rep).Money }

func (m *matcher) created(mv int32) time.Time { return m.obj(m.movs[mv].rep).Created.Time() }

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

// mention names movement mv for a finding's sentence.
func (m *matcher) mention(mv int32) reconcile.Mention {
	return reconcile.Mention{ID: m.movID(mv), Noun: m.movNoun(mv), Money: m.money(mv),
		Canceled: m.obj(m.movs[mv].rep).Status == reconcile.Canceled}
}

// mentions names movements for a finding's sentence.
func (m *matcher) mentions(movs []int32) []reconcile.Mention {
	out := make([]reconcile.Mention, len(movs))
	for k, mv := range movs {
		out[k] = m.mention(mv)
	}
	return out
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

// money formats the sum as money of currency, "at least …" when it
// reached a bound.
func (s sum) money(currency string) string {
	return reconcile.AtLeast(reconcile.Money{Amount: s.v, Currency: currency}, s.over)
}
