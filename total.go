package reconcile

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Total is an exact sum of money in one currency, in its minor units.
//
// A sum of int64 amounts need not fit an int64: two findings of
// 9,223,372,036,854,775,807 cents each are exact alone, and their sum
// would wrap around to a negative amount. A Total holds the amount in 128
// bits (two's complement), which no sum of a Go slice of int64 amounts can
// exceed: at most 2^63 terms of magnitude at most 2^63 stay below 2^127.
// The zero Total is zero in no currency.
type Total struct {
	Currency string // as in the Money summed
	hi       int64  // the upper 64 bits of the amount, sign included
	lo       uint64 // the lower 64 bits
}

// TotalOf is m as a Total.
func TotalOf(m Money) Total {
	return Total{Currency: m.Currency}.add(m.Amount)
}

// add returns t plus amount. It cannot overflow for the sums
// SumByCurrency makes (see Total); nothing else adds.
func (t Total) add(amount int64) Total {
	lo, carry := bits.Add64(t.lo, uint64(amount), 0)
	// amount>>63 is amount's sign extension into the upper word: -1 or 0.
	t.hi += amount>>63 + int64(carry)
	t.lo = lo
	return t
}

// Int64 returns the amount and true when it fits an int64; 0 and false
// when it does not, so that no caller can take a wrapped amount for it.
func (t Total) Int64() (int64, bool) {
	// It fits when the upper word is only the lower word's sign extended.
	if t.hi != int64(t.lo)>>63 {
		return 0, false
	}
	return int64(t.lo), true
}

// Money returns the total as Money and true when the amount fits an int64.
func (t Total) Money() (Money, bool) {
	a, ok := t.Int64()
	if !ok {
		return Money{}, false
	}
	return Money{Amount: a, Currency: t.Currency}, true
}

// Big returns the amount exactly, as a new big.Int the caller may change.
func (t Total) Big() *big.Int {
	if a, ok := t.Int64(); ok {
		return big.NewInt(a)
	}
	// hi·2^64 + lo, which is the two's complement value for either sign.
	v := new(big.Int).Lsh(big.NewInt(t.hi), 64)
	return v.Add(v, new(big.Int).SetUint64(t.lo))
}

// Sign is -1, 0 or +1 as the amount is negative, zero or positive.
func (t Total) Sign() int {
	switch {
	case t.hi < 0:
		return -1
	case t.hi == 0 && t.lo == 0:
		return 0
	}
	return 1
}

// Equal reports whether t and u are the same amount in the same currency.
// (go-cmp uses it too, as the amount's fields are unexported.)
func (t Total) Equal(u Total) bool { return t == u }

// digits is the amount in decimal, with a leading '-' when negative.
func (t Total) digits() string {
	if a, ok := t.Int64(); ok {
		return strconv.FormatInt(a, 10)
	}
	return t.Big().String()
}

// Major formats the amount as Money.Major does, however large:
// "18,446,744,073,709,551,614.00".
func (t Total) Major() string { return formatMinor(t.digits(), Exponent(t.Currency), true) }

// Decimal formats the amount as Money.Decimal does, however large.
func (t Total) Decimal() string { return formatMinor(t.digits(), Exponent(t.Currency), false) }

// String formats the total as Money.String does:
// "USD 18,446,744,073,709,551,614.00".
func (t Total) String() string { return strings.ToUpper(t.Currency) + " " + t.Major() }

// totalJSON is a Total on the wire. An amount that fits an int64 is
// "amount", a JSON number, exactly as Money is, so that payloads written
// before Total existed decode as before and their readers read on. One
// that does not fit is "amount_exact", a string of decimal digits, and
// "amount" is absent: a reader of "amount" must find no number rather than
// a wrong one (a JSON number beyond int64 would be rounded by readers that
// parse numbers as doubles). Exactly one of the two is present.
type totalJSON struct {
	Amount      *int64  `json:"amount,omitempty"`
	AmountExact *string `json:"amount_exact,omitempty"`
	Currency    string  `json:"currency"`
}

// MarshalJSON writes {"amount": 8900, "currency": "usd"} when the amount
// fits an int64, {"amount_exact": "18446744073709551614", "currency":
// "usd"} when it does not.
func (t Total) MarshalJSON() ([]byte, error) {
	j := totalJSON{Currency: t.Currency}
	if a, ok := t.Int64(); ok {
		j.Amount = &a
	} else {
		s := t.Big().String()
		j.AmountExact = &s
	}
	return json.Marshal(j)
}

// minTotal and maxTotal bound what a Total holds: -2^127 and 2^127-1.
var (
	maxTotal = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 127), big.NewInt(1))
	minTotal = new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 127))
)

// UnmarshalJSON reads what MarshalJSON writes, and Money's JSON: a stored
// summary written as []Money decodes unchanged. When both "amount" and
// "amount_exact" are given they must agree.
func (t *Total) UnmarshalJSON(b []byte) error {
	var j totalJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("total: %w", err)
	}
	v := Total{Currency: j.Currency}
	switch {
	case j.AmountExact != nil:
		n, ok := new(big.Int).SetString(*j.AmountExact, 10)
		// Only the canonical form, as MarshalJSON writes it: "+1" or
		// "007" are not what any writer of this payload produces.
		if !ok || n.String() != *j.AmountExact {
			return fmt.Errorf("total: amount_exact %q: want an integer in decimal digits", *j.AmountExact)
		}
		if n.Cmp(minTotal) < 0 || n.Cmp(maxTotal) > 0 {
			return fmt.Errorf("total: amount_exact %q: out of range", *j.AmountExact)
		}
		v.lo = new(big.Int).And(n, new(big.Int).SetUint64(^uint64(0))).Uint64()
		v.hi = new(big.Int).Rsh(n, 64).Int64() // Rsh floors, as the sign extension needs
		if j.Amount != nil && !v.Equal(TotalOf(Money{Amount: *j.Amount, Currency: v.Currency})) {
			return fmt.Errorf("total: amount %d and amount_exact %q disagree", *j.Amount, *j.AmountExact)
		}
	case j.Amount != nil:
		v = v.add(*j.Amount)
	}
	*t = v
	return nil
}

// SumByCurrency totals ms per currency, exactly however large, sorted by
// currency; zero amounts and money without a currency are left out.
func SumByCurrency(ms []Money) []Total {
	totals := map[string]Total{}
	for _, m := range ms {
		if m.Currency == "" || m.Amount == 0 {
			continue
		}
		totals[m.Currency] = totals[m.Currency].add(m.Amount)
	}
	var out []Total
	for _, c := range slices.Sorted(maps.Keys(totals)) {
		t := totals[c]
		t.Currency = c
		out = append(out, t)
	}
	return out
}
