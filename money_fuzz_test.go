package reconcile

import (
	"encoding/json"
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

// FuzzSumByCurrency checks SumByCurrency against math/big on any list of
// amounts in a few currencies, overflowing int64 or not: each total is the
// exact sum, formats as that sum, says whether it fits an int64 truthfully,
// and survives its JSON.
func FuzzSumByCurrency(f *testing.F) {
	word := func(a int64, cur byte) []byte {
		b := []byte{cur}
		for i := range 8 {
			b = append(b, byte(uint64(a)>>(8*i)))
		}
		return b
	}
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	f.Add(cat(word(math.MaxInt64, 0), word(math.MaxInt64, 0)))
	f.Add(cat(word(math.MaxInt64, 1), word(math.MaxInt64, 1), word(math.MaxInt64, 1)))
	f.Add(cat(word(math.MinInt64, 2), word(math.MinInt64, 2), word(math.MaxInt64, 0), word(1, 0)))
	f.Add(cat(word(math.MaxInt64, 0), word(math.MinInt64, 0), word(-1, 3), word(0, 1)))
	f.Add([]byte{})
	currencies := []string{"usd", "jpy", "kwd", ""}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ms []Money
		want := map[string]*big.Int{}
		for len(data) >= 9 {
			var a uint64
			for i := range 8 {
				a |= uint64(data[1+i]) << (8 * i)
			}
			m := Money{Amount: int64(a), Currency: currencies[int(data[0])%len(currencies)]}
			data = data[9:]
			ms = append(ms, m)
			if m.Currency == "" || m.Amount == 0 {
				continue
			}
			if want[m.Currency] == nil {
				want[m.Currency] = new(big.Int)
			}
			want[m.Currency].Add(want[m.Currency], big.NewInt(m.Amount))
		}
		got := SumByCurrency(ms)
		if len(got) != len(want) {
			t.Fatalf("SumByCurrency(%v) = %v: %d currencies, want %d", ms, got, len(got), len(want))
		}
		for i, tot := range got {
			if i > 0 && got[i-1].Currency >= tot.Currency {
				t.Errorf("totals not sorted by currency: %v", got)
			}
			w := want[tot.Currency]
			if w == nil {
				t.Fatalf("total in %q, which nothing was in", tot.Currency)
			}
			if tot.Big().Cmp(w) != 0 {
				t.Errorf("sum in %s = %s, want %s", tot.Currency, tot.Big(), w)
			}
			if tot.Sign() != w.Sign() {
				t.Errorf("Sign() of %s = %d, want %d", w, tot.Sign(), w.Sign())
			}
			a, ok := tot.Int64()
			if ok != w.IsInt64() || ok && a != w.Int64() {
				t.Errorf("Int64() of %s = %d, %t", w, a, ok)
			}
			// The formatting is the exact sum scaled down by the exponent.
			exp := Exponent(tot.Currency)
			r, okR := new(big.Rat).SetString(tot.Decimal())
			scaled := new(big.Rat).SetFrac(w, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp)), nil))
			if !okR || r.Cmp(scaled) != 0 {
				t.Errorf("Decimal() of %s %s = %q, want %s", w, tot.Currency, tot.Decimal(), scaled.FloatString(exp))
			}
			if strings.ReplaceAll(tot.Major(), ",", "") != tot.Decimal() {
				t.Errorf("Major() %q is not Decimal() %q grouped", tot.Major(), tot.Decimal())
			}
			b, err := json.Marshal(tot)
			if err != nil {
				t.Fatal(err)
			}
			var back Total
			if err := json.Unmarshal(b, &back); err != nil || !back.Equal(tot) {
				t.Errorf("JSON %s read back as %v, %v; want %v", b, back, err, tot)
			}
			if ok != strings.Contains(string(b), `"amount":`) {
				t.Errorf("JSON %s: \"amount\" must be there exactly when the sum fits an int64", b)
			}
		}
	})
}
