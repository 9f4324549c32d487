package matcher

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reconcile/internal/config"

	"reconcile"
)

var update = flag.Bool("update", false, "rewrite the want sections of testdata golden files from the current output")

// goldenNow is the clock of the acceptance scenarios.
var goldenNow = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// goldenCase is one file of testdata/cases: a run's input, with times given
// as durations before now so that a case reads like a story, and what the
// matcher must conclude.
type goldenCase struct {
	About string `json:"about"`
	// Now is the run's clock (RFC 3339); every other time is a duration
	// before it.
	Now string `json:"now"`
	// Listed is the listing window as [from, to] durations before now;
	// default ["720h", "0s"]. EventsFrom defaults to Listed's from; "none"
	// leaves it zero.
	Listed     []string `json:"listed,omitempty"`
	EventsFrom string   `json:"events_from_ago,omitempty"`
	// Subject is the window the run is about, as Listed; default Listed.
	// Context names obligations read only to link.
	Subject     []string     `json:"subject,omitempty"`
	Context     []string     `json:"context,omitempty"`
	Options     *caseOptions `json:"options,omitempty"`
	Obligations []caseObl    `json:"obligations"`
	Objects     []caseObj    `json:"objects,omitempty"`
	Keys        []caseKey    `json:"keys,omitempty"`
	Lookups     []caseLookup `json:"lookups,omitempty"`
	Want        caseWant     `json:"want"`
}

type caseOptions struct {
	DuplicateWindow  string `json:"duplicate_window,omitempty"`
	PendingGrace     string `json:"pending_grace,omitempty"`
	ReportUnverified bool   `json:"report_unverified,omitempty"`
}

type caseObl struct {
	ID         string `json:"id"`
	Kind       string `json:"kind"`
	Key        string `json:"key"`
	ProviderID string `json:"provider_id,omitempty"`
	TargetID   string `json:"target_id,omitempty"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	State      string `json:"state"`
	LeaseIn    string `json:"lease_in,omitempty"` // lease expiry relative to now: "-3h" expired, "1h" live
	CreatedAgo string `json:"created_ago"`
	UpdatedAgo string `json:"updated_ago,omitempty"` // default: created_ago
	PaidAgo    string `json:"paid_ago,omitempty"`    // default: updated_ago when PAID
}

type caseObj struct {
	ID             string            `json:"id"`
	Kind           string            `json:"kind"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status,omitempty"` // default succeeded
	AmountRefunded int64             `json:"amount_refunded,omitempty"`
	Target         string            `json:"target,omitempty"`
	PaymentIntent  string            `json:"payment_intent,omitempty"`
	Charge         string            `json:"charge,omitempty"`
	Customer       string            `json:"customer,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	CreatedAgo     string            `json:"created_ago"`
}

type caseKey struct {
	Object string `json:"object"`
	Key    string `json:"key"`
	Event  string `json:"event,omitempty"`
}

type caseLookup struct {
	ID     string `json:"id"`
	Result string `json:"result"`
	Err    string `json:"err,omitempty"`
}

// caseWant is the part of a golden file that -update rewrites.
type caseWant struct {
	Findings    []wantFinding     `json:"findings"`
	Transitions []wantTransition  `json:"transitions"`
	Links       []string          `json:"links"`   // "object → obligation (route)"
	Buckets     map[string]string `json:"buckets"` // object id → bucket
	Counts      reconcile.Counts  `json:"counts"`
}

type wantFinding struct {
	Kind         string          `json:"kind"`
	Severity     string          `json:"severity"`
	ObligationID string          `json:"obligation_id,omitempty"`
	ProviderIDs  []string        `json:"provider_ids"`
	Money        reconcile.Money `json:"money"`
	AtRisk       reconcile.Money `json:"at_risk"`
	Detail       string          `json:"detail"`
}

type wantTransition struct {
	ObligationID string `json:"obligation_id"`
	From         string `json:"from"`
	To           string `json:"to"`
	ProviderID   string `json:"provider_id"`
}

// input turns a case into the matcher's input, clock and options.
func (c *goldenCase) input(tb testing.TB) (Input, time.Time, Options) {
	tb.Helper()
	now, err := time.Parse(time.RFC3339, c.Now)
	if err != nil {
		tb.Fatalf("bad now %q: %v", c.Now, err)
	}
	ago := func(tb testing.TB, s string) time.Time {
		tb.Helper()
		if s == "" {
			return time.Time{}
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			tb.Fatalf("bad duration %q: %v", s, err)
		}
		return now.Add(-d)
	}
	var in Input
	listed := c.Listed
	if len(listed) == 0 {
		listed = []string{"720h", "0s"}
	}
	in.Listed = reconcile.Window{From: ago(tb, listed[0]), To: ago(tb, listed[1])}
	if len(c.Subject) == 2 {
		in.Subject = reconcile.Window{From: ago(tb, c.Subject[0]), To: ago(tb, c.Subject[1])}
	}
	in.Context = c.Context
	switch c.EventsFrom {
	case "":
		in.EventsFrom = in.Listed.From
	case "none":
	default:
		in.EventsFrom = ago(tb, c.EventsFrom)
	}
	opts := OptionsFrom(config.Default().Matcher)
	if o := c.Options; o != nil {
		if o.DuplicateWindow != "" {
			opts.DuplicateWindow = now.Sub(ago(tb, o.DuplicateWindow))
		}
		if o.PendingGrace != "" {
			opts.PendingGrace = now.Sub(ago(tb, o.PendingGrace))
		}
		opts.ReportUnverified = o.ReportUnverified
	}
	for _, o := range c.Obligations {
		ob := reconcile.Obligation{
			ID: o.ID, Kind: reconcile.ObjectKind(o.Kind), IdempotencyKey: o.Key, Provider: "stripe",
			ProviderID: o.ProviderID, TargetID: o.TargetID,
			Money: reconcile.Money{Amount: o.Amount, Currency: o.Currency},
			State: reconcile.State(o.State), RawState: strings.ToLower(o.State),
			CreatedAt: reconcile.StampOf(ago(tb, o.CreatedAgo)), UpdatedAt: reconcile.StampOf(ago(tb, o.CreatedAgo)),
		}
		if o.UpdatedAgo != "" {
			ob.UpdatedAt = reconcile.StampOf(ago(tb, o.UpdatedAgo))
		}
		if o.PaidAgo != "" {
			ob.PaidAt = reconcile.StampOf(ago(tb, o.PaidAgo))
		} else if ob.State == reconcile.Paid {
			ob.PaidAt = ob.UpdatedAt
		}
		if o.LeaseIn != "" {
			d, err := time.ParseDuration(o.LeaseIn)
			if err != nil {
				tb.Fatalf("bad lease_in %q: %v", o.LeaseIn, err)
			}
			ob.LeaseOwner = "worker-7"
			ob.LeaseExpiresAt = reconcile.StampOf(now.Add(d))
		}
		in.Obligations = append(in.Obligations, ob)
	}
	for _, p := range c.Objects {
		st := reconcile.Status(p.Status)
		if st == "" {
			st = reconcile.Succeeded
		}
		in.Objects = append(in.Objects, reconcile.ProviderObject{
			ID: p.ID, Kind: reconcile.ObjectKind(p.Kind), Money: reconcile.Money{Amount: p.Amount, Currency: p.Currency},
			Status: st, RawStatus: string(st), AmountRefunded: p.AmountRefunded, Target: p.Target,
			PaymentIntent: p.PaymentIntent, Charge: p.Charge, Customer: p.Customer, Metadata: p.Metadata,
			Created: reconcile.StampOf(ago(tb, p.CreatedAgo)),
		})
	}
	for i, k := range c.Keys {
		in.Keys = append(in.Keys, reconcile.KeyEvidence{ObjectID: k.Object, Key: k.Key, EventType: k.Event, EventID: "evt_" + string(rune('a'+i%26))})
	}
	for _, l := range c.Lookups {
		in.Lookups = append(in.Lookups, reconcile.Lookup{ID: l.ID, Result: reconcile.LookupResult(l.Result), Err: l.Err})
	}
	return in, now, opts
}

// summarise turns a result into the comparable want section.
func summarise(r Result) caseWant {
	w := caseWant{Findings: []wantFinding{}, Transitions: []wantTransition{}, Links: []string{}, Buckets: map[string]string{}, Counts: r.Counts}
	for _, f := range r.Findings {
		w.Findings = append(w.Findings, wantFinding{Kind: string(f.Kind), Severity: string(f.Severity), ObligationID: f.ObligationID,
			ProviderIDs: f.ProviderIDs, Money: f.Money, AtRisk: f.AtRisk, Detail: f.Detail})
	}
	for _, t := range r.Transitions {
		w.Transitions = append(w.Transitions, wantTransition{ObligationID: t.ObligationID, From: string(t.From), To: string(t.To), ProviderID: t.ProviderID})
	}
	for _, l := range r.Links {
		w.Links = append(w.Links, l.ObjectID+" → "+l.ObligationID+" ("+string(l.Route)+")")
	}
	for i, b := range r.Buckets {
		w.Buckets[r.ObjectIDs[i]] = string(b)
	}
	return w
}

func marshal(tb testing.TB, v any) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestGolden runs every case of testdata/cases and compares the result with
// the case's want section; -update rewrites that section.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "cases", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden cases in testdata/cases")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var c goldenCase
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				t.Fatalf("decode %s: %v", file, err)
			}
			in, now, opts := c.input(t)
			res := Match(in, now, opts)
			checkInvariants(t, in, now, opts, res)
			got := summarise(res)
			if *update {
				c.Want = got
				if err := os.WriteFile(file, marshal(t, c), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if g, w := marshal(t, got), marshal(t, c.Want); !bytes.Equal(g, w) {
				t.Errorf("Match(%s) differs from the golden file (-update rewrites it):\n got: %s\nwant: %s", name, g, w)
			}
		})
	}
}
