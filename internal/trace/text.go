package trace

import (
	"fmt"
	"io"
	"strings"

	"reconcile"
	"reconcile/internal/redact"
)

// WriteText writes t for people: the obligation, the provider's side, then
// the reconciler's transitions, findings and alerts. Whatever came from
// outside (ids, keys, states, the provider's and Slack's words, who
// acknowledged and why) is redact.Text on the way out: masked, and on one
// line without control or format characters (docs/design.md, "Untrusted
// text"). The JSON shape keeps the ids exact; this is where they are
// masked.
func WriteText(w io.Writer, t Trace) {
	o := t.Obligation
	r := redact.Text
	fmt.Fprintf(w, "obligation %s\n", r(o.ID))
	fmt.Fprintf(w, "  %s of %s, state %s\n", r(o.Kind), r(reconcile.Money{Amount: o.Amount, Currency: o.Currency}.String()), r(o.State))
	fmt.Fprintf(w, "  idempotency key %s\n", r(o.IdempotencyKey))
	fmt.Fprintf(w, "  provider id %s   target %s\n", orDash(o.ProviderID), orDash(o.TargetID))
	fmt.Fprintf(w, "  created %s   updated %s   paid %s\n", o.CreatedAt, o.UpdatedAt, orDash(o.PaidAt))
	if o.LeaseOwner != "" || o.LeaseExpiresAt != "" {
		fmt.Fprintf(w, "  lease %s until %s\n", orDash(o.LeaseOwner), orDash(o.LeaseExpiresAt))
	}
	if o.Account != "" {
		fmt.Fprintf(w, "  on connected account %s\n", r(o.Account))
	}
	fmt.Fprintln(w)
	if t.ProviderError != "" || t.Window == nil {
		fmt.Fprintf(w, "provider: not read (%s)\n", r(t.ProviderError))
	} else {
		fmt.Fprintf(w, "provider, read now over %s → %s\n", t.Window.From, t.Window.To)
		if len(t.Objects) == 0 {
			fmt.Fprintln(w, "  no provider object links to it or shares its target")
		}
		for _, p := range t.Objects {
			route := "not linked (same target)"
			if p.Route != "" {
				route = "linked by " + strings.ReplaceAll(p.Route, "_", " ")
			}
			fmt.Fprintf(w, "  %-16s %-14s %-10s %s   created %s   %s\n", r(p.ID), p.Kind, p.Status,
				r(reconcile.Money{Amount: p.Amount, Currency: p.Currency}.String()), p.Created, route)
		}
		for _, l := range t.Lookups {
			fmt.Fprintf(w, "  looked up %s by id: %s %s\n", r(l.ID), l.Result, r(l.Error))
		}
		if len(t.Keys) > 0 {
			fmt.Fprintln(w, "  idempotency keys from events:")
			for _, k := range t.Keys {
				fmt.Fprintf(w, "    %s created %s (%s %s, %s)\n", r(k.Key), r(k.ObjectID), r(k.EventType), r(k.EventID), k.Created)
			}
		}
		for _, f := range t.Current {
			fmt.Fprintf(w, "  now: %s %s — %s\n", f.Severity, f.Kind, r(f.Detail))
		}
		if t.Transition != nil {
			fmt.Fprintf(w, "  now: a run would mark it %s on the evidence of %s\n", t.Transition.To, r(t.Transition.ProviderID))
		}
	}
	fmt.Fprintln(w, "\ntransitions made by the reconciler")
	if len(t.Transitions) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, a := range t.Transitions {
		fmt.Fprintf(w, "  %s  %s → %s  evidence %s  run %s\n", a.At, a.From, a.To, orDash(a.ProviderID), redact.Line(a.RunID))
	}
	fmt.Fprintln(w, "\nfindings")
	if len(t.Findings) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, f := range t.Findings {
		ack := ""
		if f.AcknowledgedAt != "" {
			ack = fmt.Sprintf(", acknowledged by %s: %s", r(f.AcknowledgedBy), r(f.AckReason))
		}
		fmt.Fprintf(w, "  %s %s %s (%s%s) first seen %s, last seen %s\n    %s\n", redact.Line(f.Fingerprint), f.Severity, f.Kind,
			f.Status, ack, f.FirstSeenAt, f.LastSeenAt, r(f.Detail))
	}
	fmt.Fprintln(w, "\nalerts")
	if len(t.Alerts) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, a := range t.Alerts {
		sent := "not sent yet"
		if a.SentAt != "" {
			sent = "sent " + a.SentAt + " (ts " + r(a.SlackTS) + ")"
		}
		if a.Unknown {
			sent += ", an attempt's outcome is unknown"
		}
		fmt.Fprintf(w, "  %s %s queued %s, %d attempts, %s\n", a.Event, redact.Line(a.Fingerprint), a.CreatedAt, a.Attempts, sent)
	}
}

// orDash is s as redact.Text shows it, or a dash for a value that is not
// there.
func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return redact.Text(s)
}
