package reconcile

import (
	"math"
	"strings"
	"testing"
)

func TestMoneyFormat(t *testing.T) {
	tests := []struct {
		name string
		m    Money
		str  string
		dec  string
	}{
		{"usd", Money{8900, "usd"}, "USD 89.00", "89.00"},
		{"usd cents", Money{5, "usd"}, "USD 0.05", "0.05"},
		{"usd grouped", Money{123456789, "usd"}, "USD 1,234,567.89", "1234567.89"},
		{"jpy", Money{12000, "jpy"}, "JPY 12,000", "12000"},
		{"jpy small", Money{7, "jpy"}, "JPY 7", "7"},
		{"kwd", Money{1000, "kwd"}, "KWD 1.000", "1.000"},
		{"kwd fils", Money{5, "KWD"}, "KWD 0.005", "0.005"},
		{"negative", Money{-8900, "eur"}, "EUR -89.00", "-89.00"},
		{"zero", Money{0, "gbp"}, "GBP 0.00", "0.00"},
		{"min int64", Money{math.MinInt64, "usd"}, "USD -92,233,720,368,547,758.08", "-92233720368547758.08"},
		{"max int64 jpy", Money{math.MaxInt64, "jpy"}, "JPY 9,223,372,036,854,775,807", "9223372036854775807"},
	}
	for _, tt := range tests {
		if got := tt.m.String(); got != tt.str {
			t.Errorf("%s: String() = %q, want %q", tt.name, got, tt.str)
		}
		if got := tt.m.Decimal(); got != tt.dec {
			t.Errorf("%s: Decimal() = %q, want %q", tt.name, got, tt.dec)
		}
	}
}

func TestFingerprintStable(t *testing.T) {
	a := Fingerprint(Duplicate, "refund:1", "")
	if a != Fingerprint(Duplicate, "refund:1", "") {
		t.Fatal("Fingerprint is not deterministic")
	}
	if a == Fingerprint(Orphan, "refund:1", "") || a == Fingerprint(Duplicate, "refund:", "1") {
		t.Fatal("Fingerprint collides across different parts")
	}
	if ContentHash(Money{1, "usd"}, []string{"b", "a"}) != ContentHash(Money{1, "usd"}, []string{"a", "b"}) {
		t.Fatal("ContentHash depends on provider id order")
	}
}

func TestObligationTableValidate(t *testing.T) {
	good := DefaultObligationTable()
	if err := good.Validate("obligations"); err != nil {
		t.Fatalf("default table: %v", err)
	}
	bad := DefaultObligationTable()
	bad.Columns.State = `state"; DROP TABLE x; --`
	err := bad.Validate("obligations")
	if err == nil || !strings.Contains(err.Error(), "obligations.columns.state") {
		t.Fatalf("bad column: err = %v, want one naming obligations.columns.state", err)
	}
	bad = DefaultObligationTable()
	bad.Table = "1abc"
	if err := bad.Validate("obligations"); err == nil || !strings.Contains(err.Error(), "obligations.table") {
		t.Fatalf("bad table: err = %v", err)
	}
	bad = DefaultObligationTable()
	bad.States[Paid] = bad.States[FailedState]
	if err := bad.Validate("obligations"); err == nil || !strings.Contains(err.Error(), "obligations.states.") {
		t.Fatalf("duplicate state value: err = %v", err)
	}
}
