package store

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"reconcile"
)

// accountFinding is newFinding in a connected account, as the matcher
// makes it there: its fingerprint apart from the platform's, its
// account's name for people.
func accountFinding(account, name string, kind reconcile.FindingKind, obligationID, objectID string, atRisk int64, providerIDs ...string) reconcile.Finding {
	f := newFinding(kind, obligationID, objectID, atRisk, providerIDs...)
	f.Account, f.AccountName = account, name
	f.Fingerprint = reconcile.AccountFingerprint(account, kind, obligationID, objectID)
	return f
}

// settled is a result of no findings that settled exactly the objects
// given, as the runner names them (reconcile.AccountObject).
func settled(objects ...string) reconcile.Conclusions {
	return reconcile.Conclusions{Settled: reconcile.Settled{Objects: objects}}
}

// A connected account's finding is settled only by a run that settled
// its object in its own account: the platform's object of the same id
// settles the platform's finding and not the account's. The account
// goes through Apply, the outbox payload (and back through Due) and
// every query that returns findings; a platform finding's payload names
// no account.
func TestFindingsKeepTheirAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	now := t0()
	onPlatform := newFinding(reconcile.Orphan, "", "ch_1", 500, "ch_1")
	inAccount := accountFinding("acct_1", "Shop", reconcile.Orphan, "", "ch_1", 700, "ch_1")
	lease := accountFinding("acct_1", "Shop", reconcile.StaleLease, "charge:7", "", 0)
	if onPlatform.Fingerprint == inAccount.Fingerprint {
		t.Fatal("the two orphans of ch_1 share a fingerprint")
	}
	first := resultOf([]reconcile.Finding{onPlatform, inAccount, lease}, nil)
	first.Settled.Objects = []string{"acct_1/ch_1", "ch_1"}
	a, err := e.s.Apply(ctx, testRun("run-1", now), first, now)
	if err != nil {
		t.Fatal(err)
	}
	if a.New != 3 {
		t.Fatalf("first apply opened %d findings, want 3", a.New)
	}

	// The platform's ch_1 settled: its orphan is resolved, the account's
	// stays open.
	a, err = e.s.Apply(ctx, testRun("run-2", now.Add(time.Hour)), settled("ch_1"), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if a.Resolved != 1 || e.finding(onPlatform.Fingerprint).Status != FindingResolved {
		t.Errorf("settling the platform's ch_1 resolved %d findings, want the platform's orphan only", a.Resolved)
	}
	if got := e.finding(inAccount.Fingerprint); got.Status != FindingOpen {
		t.Errorf("settling the platform's ch_1 resolved acct_1's orphan of ch_1")
	}

	// Names are read from reconcile.accounts once a pass saved them.
	if err := e.s.SaveAccounts(ctx, "run-3", []reconcile.Account{{ID: "acct_1", Name: "Shop Ltd"}}, now); err != nil {
		t.Fatal(err)
	}
	// acct_1's ch_1 settled: its orphan is resolved.
	a, err = e.s.Apply(ctx, testRun("run-3", now.Add(2*time.Hour)), settled("acct_1/ch_1"), now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.finding(inAccount.Fingerprint); a.Resolved != 1 || got.Status != FindingResolved {
		t.Errorf("settling acct_1/ch_1 resolved %d findings, acct_1's orphan is %s; want it resolved alone", a.Resolved, got.Status)
	}

	// The queries.
	want := func(what string, r FindingRecord, f reconcile.Finding) {
		t.Helper()
		wantName := ""
		if f.Account != "" {
			wantName = "Shop Ltd"
		}
		if r.Account != f.Account || r.AccountName != wantName {
			t.Errorf("%s: %s finding's account = %q named %q, want %q named %q",
				what, r.Kind, r.Account, r.AccountName, f.Account, wantName)
		}
	}
	for _, f := range []reconcile.Finding{onPlatform, inAccount, lease} {
		r, err := e.s.Finding(ctx, f.Fingerprint)
		if err != nil {
			t.Fatal(err)
		}
		want("Finding", r, f)
		want("Findings", e.finding(f.Fingerprint), f)
	}
	naming, err := e.s.FindingsNaming(ctx, "ch_1")
	if err != nil {
		t.Fatal(err)
	}
	accounts := map[string]bool{}
	for _, r := range naming {
		accounts[r.Account] = true
	}
	if len(naming) != 2 || !accounts[""] || !accounts["acct_1"] {
		t.Errorf("FindingsNaming(ch_1) = %d findings of accounts %v, want the platform's and acct_1's", len(naming), accounts)
	}
	h, err := e.s.ObligationHistory(ctx, "charge:7")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Findings) != 1 {
		t.Fatalf("ObligationHistory(charge:7) = %d findings, want 1", len(h.Findings))
	}
	want("ObligationHistory", h.Findings[0], lease)
	of, err := e.s.FindingsOf(ctx, []string{lease.Fingerprint})
	if err != nil || len(of) != 1 {
		t.Fatalf("FindingsOf = %v, %v", of, err)
	}
	want("FindingsOf", of[0], lease)
	acked, err := e.s.Ack(ctx, lease.Fingerprint, "ann", "known", now)
	if err != nil {
		t.Fatal(err)
	}
	want("Ack", acked, lease)
	reopened, err := e.s.Reopen(ctx, lease.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	want("Reopen", reopened, lease)
	ackedOpen, err := e.s.AckOpen(ctx, []string{lease.Fingerprint}, "ann", "known", now)
	if err != nil || len(ackedOpen) != 1 {
		t.Fatalf("AckOpen = %v, %v", ackedOpen, err)
	}
	want("AckOpen", ackedOpen[0], lease)

	// The outbox: what Due decodes, and the payload as stored.
	due, err := e.s.Due(ctx, now.Add(3*time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ account, name string }
	got := map[string]seen{}
	for _, al := range due {
		if al.Event == reconcile.AlertSummary {
			continue
		}
		got[string(al.Event)+" "+al.Finding.Fingerprint] = seen{al.Finding.Account, al.Finding.AccountName}
	}
	wantAlerts := map[string]seen{
		"firing " + onPlatform.Fingerprint:   {},
		"firing " + inAccount.Fingerprint:    {"acct_1", "Shop"},
		"firing " + lease.Fingerprint:        {"acct_1", "Shop"},
		"resolved " + onPlatform.Fingerprint: {},
		// A resolved finding's alert names its account as last recorded.
		"resolved " + inAccount.Fingerprint: {"acct_1", "Shop Ltd"},
	}
	if diff := cmp.Diff(wantAlerts, got, cmp.AllowUnexported(seen{})); diff != "" {
		t.Errorf("accounts of the alerts Due returns (-want +got):\n%s", diff)
	}
	rows, err := e.pool.Query(ctx, `SELECT fingerprint, payload FROM reconcile.outbox WHERE fingerprint IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			fp      string
			payload map[string]any
		)
		if err := rows.Scan(&fp, &payload); err != nil {
			t.Fatal(err)
		}
		_, hasAccount := payload["account"]
		_, hasName := payload["account_name"]
		if platform := fp == onPlatform.Fingerprint; platform == hasAccount || platform == hasName {
			b, _ := json.Marshal(payload)
			t.Errorf("payload of %s: %s; want account and account_name on a connected account's only", fp, b)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// SaveAccounts keeps each connected account's name as the last pass
// read it, never the platform's, and findings name their accounts by them.
func TestSaveAccounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	now := t0()
	if err := e.s.SaveAccounts(ctx, "run-1", []reconcile.Account{
		{ID: "", Name: "the platform"}, {ID: "acct_1", Name: "Shop"}, {ID: "acct_2", Name: "Cafe"}, {ID: "acct_3"},
	}, now); err != nil {
		t.Fatal(err)
	}
	// The second pass renames one, finds another nameless now, says
	// nothing of the third, and lists one account twice.
	if err := e.s.SaveAccounts(ctx, "run-2", []reconcile.Account{
		{ID: "acct_1", Name: "Shop Ltd"}, {ID: "acct_2"}, {ID: "acct_4", Name: "Old"}, {ID: "acct_4", Name: "New"},
	}, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	names := e.accountNames()
	want := map[string]string{"acct_1": "Shop Ltd", "acct_2": "", "acct_3": "", "acct_4": "New"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("account names (-want +got):\n%s", diff)
	}
	if n := e.count(`SELECT count(*) FROM reconcile.accounts WHERE run_id = 'run-2' AND seen_at = $1`, now.Add(time.Hour)); n != 3 {
		t.Errorf("%d accounts recorded as read by run-2, want 3", n)
	}
	if err := e.s.SaveAccounts(ctx, "run-3", nil, now); err != nil {
		t.Errorf("SaveAccounts of no accounts: %v", err)
	}
	if err := e.s.SaveAccounts(ctx, "", []reconcile.Account{{ID: "acct_9"}}, now); err == nil {
		t.Errorf("SaveAccounts without a run id succeeded")
	}
	after := e.accountNames()
	if !maps.Equal(want, after) {
		t.Errorf("account names after saves of nothing = %v, want %v", after, want)
	}
}

// accountNames are the names reconcile.accounts keeps, by account id:
// what the pages and messages name accounts by (findingColumns).
func (e *env) accountNames() map[string]string {
	e.tb.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id, name FROM reconcile.accounts`)
	if err != nil {
		e.tb.Fatal(err)
	}
	names := map[string]string{}
	var id, name string
	if _, err := pgx.ForEachRow(rows, []any{&id, &name}, func() error {
		names[id] = name
		return nil
	}); err != nil {
		e.tb.Fatal(err)
	}
	return names
}
