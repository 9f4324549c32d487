package reconcile

import (
	"encoding/json"
	"math"
	"math/big"
	"strings"
	"testing"
)

// bigSum is the exact sum of amounts, by math/big.
func bigSum(amounts ...int64) *big.Int {
	s := new(big.Int)
	for _, a := range amounts {
		s.Add(s, big.NewInt(a))
	}
	return s
}

func TestSumByCurrency(t *testing.T) {
	got := SumByCurrency([]Money{{8900, "usd"}, {900, "eur"}, {1100, "usd"}, {0, "jpy"}, {5, ""}})
	if len(got) != 2 || got[0].String() != "EUR 9.00" || got[1].String() != "USD 100.00" {
		t.Errorf("SumByCurrency = %v, want [EUR 9.00 USD 100.00]", got)
	}
	if a, ok := got[1].Int64(); !ok || a != 10000 {
		t.Errorf("USD total Int64() = %d, %t; want 10000, true", a, ok)
	}
	if got := SumByCurrency(nil); len(got) != 0 {
		t.Errorf("SumByCurrency(nil) = %v, want none", got)
	}
}

// Sums past int64 are exact, never wrapped (docs/design.md, "Findings"): two
// findings of MaxInt64 cents each are USD 184,467,440,737,095,516.14, not
// USD -0.02.
func TestSumByCurrencyBeyondInt64(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	tests := []struct {
		name    string
		amounts []int64
		cur     string
		str     string
		fits    bool
	}{
		{"two max", []int64{maxI, maxI}, "usd", "USD 184,467,440,737,095,516.14", false},
		{"three max", []int64{maxI, maxI, maxI}, "usd", "USD 276,701,161,105,643,274.21", false},
		{"three max jpy", []int64{maxI, maxI, maxI}, "jpy", "JPY 27,670,116,110,564,327,421", false},
		{"two max kwd", []int64{maxI, maxI}, "kwd", "KWD 18,446,744,073,709,551.614", false},
		{"max plus one", []int64{maxI, 1}, "jpy", "JPY 9,223,372,036,854,775,808", false},
		{"two min", []int64{minI, minI}, "usd", "USD -184,467,440,737,095,516.16", false},
		{"min minus one", []int64{minI, -1}, "jpy", "JPY -9,223,372,036,854,775,809", false},
		{"max and min", []int64{maxI, minI}, "usd", "USD -0.01", true},
		{"past max and back", []int64{maxI, maxI, minI, minI}, "usd", "USD -0.02", true},
		{"past min and back", []int64{minI, minI, maxI, maxI, 5}, "jpy", "JPY 3", true},
		{"max exactly", []int64{maxI - 1, 1}, "jpy", "JPY 9,223,372,036,854,775,807", true},
		{"min exactly", []int64{minI + 1, -1}, "jpy", "JPY -9,223,372,036,854,775,808", true},
	}
	for _, tt := range tests {
		ms := make([]Money, len(tt.amounts))
		for i, a := range tt.amounts {
			ms[i] = Money{a, tt.cur}
		}
		got := SumByCurrency(ms)
		if len(got) != 1 {
			t.Fatalf("%s: SumByCurrency = %v, want one total", tt.name, got)
		}
		want := bigSum(tt.amounts...)
		if got[0].Big().Cmp(want) != 0 {
			t.Errorf("%s: sum = %s, want %s", tt.name, got[0].Big(), want)
		}
		if s := got[0].String(); s != tt.str {
			t.Errorf("%s: String() = %q, want %q", tt.name, s, tt.str)
		}
		if a, ok := got[0].Int64(); ok != tt.fits || ok && a != want.Int64() || !ok && a != 0 {
			t.Errorf("%s: Int64() = %d, %t; want fits=%t", tt.name, a, ok, tt.fits)
		}
		if m, ok := got[0].Money(); ok != tt.fits || ok && m != (Money{want.Int64(), tt.cur}) {
			t.Errorf("%s: Money() = %v, %t; want fits=%t", tt.name, m, ok, tt.fits)
		}
		if got[0].Sign() != want.Sign() {
			t.Errorf("%s: Sign() = %d, want %d", tt.name, got[0].Sign(), want.Sign())
		}
	}

	// Currencies are summed apart: usd's overflow is not jpy's.
	got := SumByCurrency([]Money{{maxI, "usd"}, {maxI, "jpy"}, {maxI, "usd"}, {1, "jpy"}, {-5, "eur"}})
	var strs []string
	for _, t := range got {
		strs = append(strs, t.String())
	}
	if want := "EUR -0.05; JPY 9,223,372,036,854,775,808; USD 184,467,440,737,095,516.14"; strings.Join(strs, "; ") != want {
		t.Errorf("mixed currencies = %q, want %q", strings.Join(strs, "; "), want)
	}
}

func TestTotalJSON(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	sum := func(cur string, amounts ...int64) Total {
		ms := make([]Money, len(amounts))
		for i, a := range amounts {
			ms[i] = Money{a, cur}
		}
		return SumByCurrency(ms)[0]
	}
	tests := []struct {
		name string
		t    Total
		json string
	}{
		{"fits: as Money", sum("usd", 8900, 500), `{"amount":9400,"currency":"usd"}`},
		{"max int64: still a number", sum("jpy", maxI), `{"amount":9223372036854775807,"currency":"jpy"}`},
		{"min int64: still a number", sum("jpy", minI), `{"amount":-9223372036854775808,"currency":"jpy"}`},
		{"two max: exact, no amount", sum("usd", maxI, maxI), `{"amount_exact":"18446744073709551614","currency":"usd"}`},
		{"two min: exact, no amount", sum("usd", minI, minI), `{"amount_exact":"-18446744073709551616","currency":"usd"}`},
		{"zero in a currency", sum("usd", 5, -5), `{"amount":0,"currency":"usd"}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.t)
		if err != nil || string(b) != tt.json {
			t.Errorf("%s: Marshal = %s, %v; want %s", tt.name, b, err, tt.json)
			continue
		}
		var back Total
		if err := json.Unmarshal(b, &back); err != nil || !back.Equal(tt.t) {
			t.Errorf("%s: Unmarshal(%s) = %v, %v; want %v", tt.name, b, back, err, tt.t)
		}
		// What an existing reader of Money sees: the amount when it fits,
		// and when it does not, no "amount" at all rather than a wrong one.
		var old map[string]any
		if err := json.Unmarshal(b, &old); err != nil {
			t.Fatal(err)
		}
		if _, ok := tt.t.Int64(); ok != (old["amount"] != nil) {
			t.Errorf("%s: %s: an amount that fits is \"amount\", one that does not is absent", tt.name, b)
		}
	}

	// A summary stored before Total existed, with its at_risk as []Money,
	// decodes unchanged.
	oldPayload, err := json.Marshal(map[string]any{"run_id": "run-1", "at_risk": []Money{{12000, "jpy"}, {9000, "usd"}}})
	if err != nil {
		t.Fatal(err)
	}
	var s RunSummary
	if err := json.Unmarshal(oldPayload, &s); err != nil {
		t.Fatalf("old summary payload %s: %v", oldPayload, err)
	}
	if len(s.AtRisk) != 2 || !s.AtRisk[0].Equal(TotalOf(Money{12000, "jpy"})) || !s.AtRisk[1].Equal(TotalOf(Money{9000, "usd"})) {
		t.Errorf("old summary payload %s decoded at_risk %v, want [JPY 12,000 USD 90.00]", oldPayload, s.AtRisk)
	}

	for _, bad := range []string{
		`{"amount_exact":"12x","currency":"usd"}`,
		`{"amount_exact":"+18446744073709551614","currency":"usd"}`,
		`{"amount_exact":"018446744073709551614","currency":"usd"}`,
		`{"amount_exact":"","currency":"usd"}`,
		`{"amount_exact":18446744073709551614,"currency":"usd"}`,
		`{"amount_exact":"170141183460469231731687303715884105728","currency":"usd"}`,  // 2^127
		`{"amount_exact":"-170141183460469231731687303715884105729","currency":"usd"}`, // -2^127-1
		`{"amount":18446744073709551614,"currency":"usd"}`,
		`{"amount":1.5,"currency":"usd"}`,
		`{"amount":5,"amount_exact":"6","currency":"usd"}`,
	} {
		var got Total
		if err := json.Unmarshal([]byte(bad), &got); err == nil {
			t.Errorf("Unmarshal(%s) = %v, want an error", bad, got)
		}
	}
	for in, want := range map[string]string{
		`{"amount_exact":"170141183460469231731687303715884105727","currency":"jpy"}`:  "JPY 170,141,183,460,469,231,731,687,303,715,884,105,727",
		`{"amount_exact":"-170141183460469231731687303715884105728","currency":"jpy"}`: "JPY -170,141,183,460,469,231,731,687,303,715,884,105,728",
		`{"amount":5,"amount_exact":"5","currency":"usd"}`:                             "USD 0.05",
		`{"amount_exact":"-1","currency":"usd"}`:                                       "USD -0.01",
	} {
		var got Total
		if err := json.Unmarshal([]byte(in), &got); err != nil || got.String() != want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %s", in, got, err, want)
		}
	}
}
