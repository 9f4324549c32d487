package reconcile

import (
	"strings"
	"testing"
)

func TestValidAccountID(t *testing.T) {
	for id, want := range map[string]bool{
		"acct_1Nv0FGQ9RKHgCVdK": true, "acct_A": true, "acct_" + strings.Repeat("a", 64): true,
		"": false, "acct_": false, "ACCT_1": false, "acct_1 ": false, " acct_1": false, "acct_1/ch_1": false,
		"acct_1\n": false, "acct_é": false, "cus_1": false, "acct__1": false, "acct_" + strings.Repeat("a", 65): false,
	} {
		if got := ValidAccountID(id); got != want {
			t.Errorf("ValidAccountID(%q) = %t, want %t", id, got, want)
		}
	}
}

// A platform's object keeps its own id as its identity across accounts;
// a connected account's is qualified by the account.
func TestAccountObjectAndLabel(t *testing.T) {
	if got := AccountObject("", "ch_1"); got != "ch_1" {
		t.Errorf("AccountObject(platform) = %q", got)
	}
	if got := AccountObject("acct_1", "ch_1"); got != "acct_1/ch_1" {
		t.Errorf("AccountObject(acct_1) = %q", got)
	}
	for a, want := range map[Account]string{{}: "platform", {ID: "acct_1"}: "acct_1", {ID: "acct_1", Name: "Shop"}: "Shop (acct_1)"} {
		if got := a.Label(); got != want {
			t.Errorf("%+v.Label() = %q, want %q", a, got, want)
		}
	}
}
