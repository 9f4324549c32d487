package reconcile

import (
	"fmt"
	"strings"
	"time"
)

// The sentences findings say, beside the table of kinds (kinds.go): the
// matcher decides what it found and hands over what a sentence names;
// these functions say it in finance's words, and only what was read
// (docs/design.md, "Findings"). Each returns one or two whole sentences.

// Mention names one money movement in a sentence: its id (an intent's for
// an intent and its charges), what it is ("payment", "charge", "refund",
// "record") and the money it moved.
type Mention struct {
	ID    string
	Noun  string
	Money Money
	// Canceled is set on a record that did not move money because it was
	// canceled rather than failed.
	Canceled bool
}

func mentionIDs(ms []Mention) string {
	ids := make([]string, len(ms))
	for k, m := range ms {
		ids[k] = m.ID
	}
	return strings.Join(ids, ", ")
}

// AtLeast formats money; over says the true figure lies beyond it (a sum
// that no int64 holds), which the sentence says rather than wrap around.
func AtLeast(m Money, over bool) string {
	if over {
		return "at least " + m.String()
	}
	return m.String()
}

// DetailConflict: one movement claimed by several obligations.
func DetailConflict(mv Mention, obligations []string) string {
	return fmt.Sprintf("The provider's %s %s of %s is claimed by %s obligations (%s): it cannot count for any of them until someone decides which it belongs to.",
		mv.Noun, mv.ID, mv.Money, count(len(obligations)), strings.Join(obligations, ", "))
}

// DetailDuplicate: o moved money more than once; tooMuch is what moved
// beyond it, formatted.
func DetailDuplicate(o *Obligation, movs []Mention, tooMuch string) string {
	noun, verb, loss := oblWords(o.Kind)
	return fmt.Sprintf("%s %s of %s was %s %s by the provider (%s): %s too much %s.",
		noun, o.ID, o.Money, verb, times(len(movs)), mentionIDs(movs), tooMuch, loss)
}

// DetailAmount: the movements of o that moved other money (each
// Mention's Money is the money that differs); diff is the difference,
// formatted, when there is one movement of o's own currency.
func DetailAmount(o *Obligation, off []Mention, diff string) string {
	noun, verb, _ := oblWords(o.Kind)
	switch mon := off[0].Money; {
	case len(off) > 1:
		parts := make([]string, len(off))
		for k, mv := range off {
			parts[k] = fmt.Sprintf("%s %s", mv.Money, mv.ID)
		}
		return fmt.Sprintf("%s %s was approved for %s, but the provider %s other amounts for it (%s).",
			noun, o.ID, o.Money, verb, strings.Join(parts, ", "))
	case !strings.EqualFold(mon.Currency, o.Money.Currency):
		return fmt.Sprintf("%s %s was approved for %s, but the provider %s %s for it (%s), in another currency.",
			noun, o.ID, o.Money, verb, mon, off[0].ID)
	default:
		more := "more"
		if mon.Amount < o.Money.Amount {
			more = "less"
		}
		return fmt.Sprintf("%s %s was approved for %s, but the provider %s %s for it (%s): %s %s than approved.",
			noun, o.ID, o.Money, verb, mon, off[0].ID, diff, more)
	}
}

// DetailPaidFailed: o is PAID, but its records all failed or were
// canceled; unread is what was not read of its records ("" if nothing).
func DetailPaidFailed(o *Obligation, failed []Mention, unread string) string {
	noun, _, _ := oblWords(o.Kind)
	what := "failed"
	if len(failed) == 1 && failed[0].Canceled {
		what = "was canceled"
	}
	rec := "record of it (" + mentionIDs(failed) + ") " + what
	if len(failed) > 1 {
		rec = "records of it (" + mentionIDs(failed) + ") all failed or were canceled"
	}
	outcome := ": no money moved."
	if unread != "" {
		outcome = ", and nothing else read belongs to it; " + unread + "."
	}
	return fmt.Sprintf("%s %s of %s is marked paid, but the provider's %s%s", noun, o.ID, o.Money, rec, outcome)
}

// DetailPaidStale: o is PAID, but its record is still pending long after
// the grace period.
func DetailPaidStale(o *Obligation, stale []Mention, pendingFor time.Duration, unread string) string {
	noun, _, _ := oblWords(o.Kind)
	outcome := ": no money has moved yet."
	if unread != "" {
		outcome = ", and nothing else read belongs to it; " + unread + "."
	}
	return fmt.Sprintf("%s %s of %s is marked paid, but the provider's record of it (%s) is still pending after %s%s",
		noun, o.ID, o.Money, mentionIDs(stale), human(pendingFor), outcome)
}

// DetailNotFound: o is PAID, and the record it names was looked up and
// does not exist.
func DetailNotFound(o *Obligation) string {
	noun, _, _ := oblWords(o.Kind)
	return fmt.Sprintf("%s %s of %s is marked paid, but the provider has no record %s: it was looked up and does not exist.",
		noun, o.ID, o.Money, o.ProviderID)
}

// DetailNoSuchRecord: o is PAID with a provider id, and the listing of
// listed, which covers its time, holds no such record.
func DetailNoSuchRecord(o *Obligation, listed Window) string {
	noun, _, _ := oblWords(o.Kind)
	return fmt.Sprintf("%s %s of %s is marked paid with provider record %s, but the provider has no such record between %s and %s.",
		noun, o.ID, o.Money, o.ProviderID, stamp(listed.From), stamp(listed.To))
}

// DetailNothingBelongs: o is PAID, and nothing the provider recorded over
// listed belongs to it; named is the record of another kind it names, if
// any.
func DetailNothingBelongs(o *Obligation, listed Window, named *Mention) string {
	noun, _, _ := oblWords(o.Kind)
	return fmt.Sprintf("%s %s of %s is marked paid, but nothing the provider recorded between %s and %s belongs to it%s.",
		noun, o.ID, o.Money, stamp(listed.From), stamp(listed.To), wrongKind(o, named))
}

// wrongKind says that the record o names is of another kind, so that it
// could not link; "" when named is nil.
func wrongKind(o *Obligation, named *Mention) string {
	if named == nil {
		return ""
	}
	return fmt.Sprintf(" (the provider record it names, %s, is a %s)", o.ProviderID, named.Noun)
}

// DetailUnverified: o is PAID and nothing links to it, but absence could
// not be proved; why says what could not be read, from the Why functions.
func DetailUnverified(o *Obligation, why string) string {
	noun, _, _ := oblWords(o.Kind)
	return fmt.Sprintf("%s %s of %s is marked paid and no provider record links to it, but this could not be checked: %s.",
		noun, o.ID, o.Money, why)
}

// WhyLookupFailed: the lookup of the record o names failed (err, if said).
func WhyLookupFailed(id, err string) string {
	reason := "failed"
	if err != "" {
		reason += " (" + err + ")"
	}
	return fmt.Sprintf("the lookup of %s %s", id, reason)
}

// WhyNotAmongRead: the record o names exists but was not read with the
// rest.
func WhyNotAmongRead(id string) string {
	return fmt.Sprintf("%s exists but was not among the records read", id)
}

// WhyRecordsNotRead: the records (and, for an obligation only its key
// could link, the events) of o's time were not all read.
func WhyRecordsNotRead(o *Obligation, events bool, named *Mention) string {
	if events {
		return "the provider's records and events of its time were not all read" + wrongKind(o, named)
	}
	return "the provider's records of its time were not all read"
}

// DetailMoved: money moved for o, which says it must not have.
func DetailMoved(o *Obligation, movs []Mention) string {
	noun, verb, _ := oblWords(o.Kind)
	var state string
	switch o.State {
	case FailedState:
		state = "is marked failed"
	case Approved:
		state = "is approved and waiting to be executed"
	case PendingApproval:
		state = "is still awaiting approval"
	case RequiresReview:
		state = "is held for review"
	default:
		state = fmt.Sprintf("is in state %q, which the reconciler's configuration does not map (so it is never marked paid)", o.RawState)
	}
	moved := fmt.Sprintf("%s for it (%s)", movs[0].Money, movs[0].ID)
	if len(movs) > 1 {
		moved = fmt.Sprintf("money for it %s (%s)", times(len(movs)), mentionIDs(movs))
	}
	return fmt.Sprintf("%s %s of %s %s, but the provider already %s %s.", noun, o.ID, o.Money, state, verb, moved)
}

// DetailStaleLease: o is EXECUTING and its lease expired (or it has none);
// shows is what the provider shows for it (NoSuccess).
func DetailStaleLease(o *Obligation, now time.Time, shows string) string {
	noun, _, _ := oblWords(o.Kind)
	stopped := "no part of the system is working on it"
	if !o.LeaseExpiresAt.IsZero() {
		stopped = fmt.Sprintf("the system stopped working on it %s ago (%s)", human(now.Sub(o.LeaseExpiresAt.Time())), stamp(o.LeaseExpiresAt.Time()))
	}
	return fmt.Sprintf("%s %s of %s was being paid, but %s, and %s.", noun, o.ID, o.Money, stopped, shows)
}

// DetailUnknown: o waits for confirmation; shows is what the provider
// shows for it (NoSuccess).
func DetailUnknown(o *Obligation, shows string) string {
	noun, _, _ := oblWords(o.Kind)
	return fmt.Sprintf("%s %s of %s was sent to the provider without an answer, and %s.", noun, o.ID, o.Money, shows)
}

// NoSuccess says what the provider shows for o without a succeeded
// movement: its failed records, or its records pending (the oldest for
// pendingFor), or nothing. Where unread says what of its records was not
// read, it says what was read and not "nothing".
func NoSuccess(o *Obligation, failed, pending []Mention, pendingFor time.Duration, unread string) string {
	_, verb, _ := oblWords(o.Kind)
	switch {
	case len(failed) > 0 && len(pending) == 0:
		what := "failed"
		if len(failed) == 1 && failed[0].Canceled {
			what = "was canceled"
		}
		recs := "only record of it (" + mentionIDs(failed) + ")"
		if len(failed) > 1 {
			recs, what = "only records of it ("+mentionIDs(failed)+")", "failed or were canceled"
		}
		if unread != "" {
			return fmt.Sprintf("the %s among the provider's records read %s; %s", recs, what, unread)
		}
		return fmt.Sprintf("the provider's %s %s, so no money moved", recs, what)
	case len(pending) > 0:
		s := fmt.Sprintf("the provider's record of it (%s) is still pending after %s", mentionIDs(pending), human(pendingFor))
		if unread != "" {
			s += "; and " + unread
		}
		return s
	}
	if unread != "" {
		return fmt.Sprintf("nothing %s for it is among the provider's records read; %s", verb, unread)
	}
	return "the provider shows nothing " + verb + " for it"
}

// A Gap is what a run did not read of the records a decision about an
// obligation rests on (docs/design.md, "Coverage"); the zero Gap is none.
type Gap struct {
	Kind GapKind
	// Listed and EventsFrom are what was read; Created is the
	// obligation's creation; Reach the max_lookback that would read back
	// to its records.
	Listed     Window
	EventsFrom time.Time
	Created    time.Time
	Reach      time.Duration
	// Record and Err are, for GapLookup, the record the obligation names
	// and why its retrieval failed ("" if not said).
	Record, Err string
}

// GapKind names what was not read.
type GapKind int

// The gaps.
const (
	GapNone      GapKind = iota
	GapNoListing         // no listing was read at all
	GapLater             // the listing stops before now
	GapEarlier           // the listing begins after the obligation's records do
	GapNoEvents          // no events were read
	GapEvents            // the events read begin after the records do
	GapLookup            // the retrieval of the record its provider_id names failed
)

// String says the gap as a clause of a finding's detail, with how to
// read what is missing; "" for none.
func (g Gap) String() string {
	switch g.Kind {
	case GapNoListing:
		return "no listing of the provider's records was read"
	case GapLater:
		return fmt.Sprintf("the provider's records created after %s were not read", stamp(g.Listed.To))
	case GapEarlier:
		return fmt.Sprintf("the provider's records before %s were not read (it was created %s; "+
			"a max_lookback of at least %dh reads back that far)", stamp(g.Listed.From), stamp(g.Created), int64(g.Reach/time.Hour))
	case GapNoEvents:
		return "no provider events were read, and only they tell which idempotency key made each record"
	case GapEvents:
		return fmt.Sprintf("the provider's events before %s, which tell which idempotency key made each record, "+
			"were not read (Stripe keeps events 30 days; only what the reconciler's mirror kept is older)", stamp(g.EventsFrom))
	case GapLookup:
		return WhyLookupFailed(g.Record, g.Err)
	}
	return ""
}

// DetailUnconfirmed: one succeeded movement of the right money reaches o,
// which may be marked PAID, but the run did not read every record that
// could show a second one (gap), so it is not marked.
func DetailUnconfirmed(kind FindingKind, o *Obligation, mv Mention, gap Gap) string {
	noun, verb, _ := oblWords(o.Kind)
	state := "was sent to the provider without an answer"
	if kind == StaleLease {
		state = "was being paid when the system stopped working on it"
	}
	return fmt.Sprintf("%s %s of %s %s. The provider %s %s for it (%s), but it was not marked paid: %s, so a second payment "+
		"there could not be ruled out.", noun, o.ID, o.Money, state, verb, mv.Money, mv.ID, gap)
}

// DetailOrphan: a movement belongs to no obligation. On a refund, target
// is what it refunds (its noun first); keyless says the events that would
// tell its idempotency key were not read.
func DetailOrphan(mv Mention, refund bool, targetNoun, target string, keyless bool) string {
	on, verb := "", "collected"
	if refund {
		verb = "paid out"
		if target != "" {
			on = fmt.Sprintf(" (on %s %s)", targetNoun, target)
		}
	}
	return fmt.Sprintf("%s %s of %s%s was %s by the provider but belongs to no obligation%s.",
		capital(mv.Noun), mv.ID, mv.Money, on, verb, keylessClause(keyless))
}

// DetailSuspect: movement s belongs to no obligation but repeats twin of
// o: the same target (a refund's refunded movement, a charge's customer),
// the same money, apart apart.
func DetailSuspect(s, twin Mention, o *Obligation, refund bool, targetNoun, target string, apart time.Duration, keyless bool) string {
	same, outcome := "same customer "+target, "the customer was probably charged twice"
	if refund {
		same, outcome = "same "+targetNoun+" "+target, "probably paid out twice"
	}
	return fmt.Sprintf("%s %s of %s belongs to no obligation%s but repeats %s %s of %s (%s, same amount, %s apart): %s.",
		capital(s.Noun), s.ID, s.Money, keylessClause(keyless), twin.Noun, twin.ID, o.ID, same, human(apart), outcome)
}

func keylessClause(keyless bool) string {
	if !keyless {
		return ""
	}
	return " that its metadata or id names (the provider's events from its time, which alone would tell the idempotency key it was made with, were not read)"
}

// oblWords are the words a sentence about an obligation of kind k uses.
func oblWords(k ObjectKind) (noun, verb, loss string) {
	switch k {
	case Refund:
		return "Refund", "paid out", "left the account"
	case Charge, PaymentIntent:
		return "Charge", "collected", "was taken from the customer"
	}
	return "Obligation", "moved", "moved"
}

func count(n int) string {
	if n >= 2 && n <= 9 {
		return []string{"two", "three", "four", "five", "six", "seven", "eight", "nine"}[n-2]
	}
	return fmt.Sprint(n)
}

func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	case 3:
		return "three times"
	}
	return fmt.Sprintf("%d times", n)
}

// human formats a duration the way a person says it.
func human(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case d < time.Minute:
		return unit(int64(d/time.Second), "second")
	case d < 2*time.Hour:
		return unit(int64(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int64(d/time.Hour), "hour")
	}
	return unit(int64(d/(24*time.Hour)), "day")
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
