package reconcile

import (
	"math"
	"math/big"
	"strings"
	"testing"
)

// FuzzMoneyFormat checks the formatting of any amount in any currency
// against exact arithmetic: the decimal form reads back as the amount in
// major units, with as many decimals as the currency has, and the grouped
// form is the decimal form with a comma between every three digits.
func FuzzMoneyFormat(f *testing.F) {
	for _, s := range []struct {
		amount   int64
		currency string
	}{
		{8900, "usd"}, {5, "usd"}, {12000, "jpy"}, {1000, "kwd"}, {-8900, "eur"}, {0, ""},
		{math.MinInt64, "usd"}, {math.MaxInt64, "jpy"}, {-1, "BHD"}, {999, "xyz"}, {100, "VND"},
	} {
		f.Add(s.amount, s.currency)
	}
	f.Fuzz(func(t *testing.T, amount int64, currency string) {
		m := Money{Amount: amount, Currency: currency}
		exp := Exponent(currency)
		dec, major, str := m.Decimal(), m.Major(), m.String()

		// The decimal form is the amount scaled down by the exponent, exactly.
		r, ok := new(big.Rat).SetString(dec)
		if !ok {
			t.Fatalf("Decimal(%d %q) = %q: not a decimal number", amount, currency, dec)
		}
		want := new(big.Rat).SetFrac(big.NewInt(amount), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp)), nil))
		if r.Cmp(want) != 0 {
			t.Errorf("Decimal(%d %q) = %q, want %s", amount, currency, dec, want.FloatString(exp))
		}
		whole, frac, dot := strings.Cut(strings.TrimPrefix(dec, "-"), ".")
		if dot != (exp > 0) || len(frac) != exp {
			t.Errorf("Decimal(%d %q) = %q: %d decimals, want %d", amount, currency, dec, len(frac), exp)
		}
		if whole == "" || len(whole) > 1 && whole[0] == '0' {
			t.Errorf("Decimal(%d %q) = %q: malformed whole part", amount, currency, dec)
		}
		if strings.HasPrefix(dec, "-") != (amount < 0) {
			t.Errorf("Decimal(%d %q) = %q: sign", amount, currency, dec)
		}

		// The grouped form differs only by commas, every three digits.
		if got := strings.ReplaceAll(major, ",", ""); got != dec {
			t.Errorf("Major(%d %q) = %q, want %q with thousands separated", amount, currency, major, dec)
		}
		groups := strings.Split(strings.TrimPrefix(strings.SplitN(major, ".", 2)[0], "-"), ",")
		for i, g := range groups {
			if i > 0 && len(g) != 3 || i == 0 && (len(g) < 1 || len(g) > 3) {
				t.Errorf("Major(%d %q) = %q: group %q", amount, currency, major, g)
			}
		}
		if want := strings.ToUpper(currency) + " " + major; str != want {
			t.Errorf("String(%d %q) = %q, want %q", amount, currency, str, want)
		}
	})
}
