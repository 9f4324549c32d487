package reconcile

// Meaning is what a finding's money at risk is, for the books: money paid
// out too much, money collected too little or too much, or money that may
// or may not have moved. Amounts of different meanings are never added up
// (docs/design.md, "Findings").
type Meaning string

// The meanings.
const (
	PaidOutTooMuch Meaning = "paid_out_too_much" // duplicates, suspected duplicates, refunds nobody approved
	CollectedWrong Meaning = "collected_wrong"   // wrong amounts and statuses, charges nobody approved
	Unconfirmed    Meaning = "unconfirmed"       // stuck or unknown payments, paid without evidence
)

// Meanings lists the meanings in display order.
var Meanings = []Meaning{PaidOutTooMuch, CollectedWrong, Unconfirmed}

// Label is how finance reads the meaning.
func (m Meaning) Label() string {
	switch m {
	case PaidOutTooMuch:
		return "Paid out too much"
	case CollectedWrong:
		return "Collected too little or too much"
	case Unconfirmed:
		return "Unconfirmed (may or may not have moved)"
	}
	return string(m)
}

// Meaning is what f's money at risk is: its kind's, except that money
// moved twice or outside the workflow was collected, not paid out, unless
// it paid out (a refund: Finding.PaidOut).
func (f Finding) Meaning() Meaning {
	m := f.Kind.Info().Meaning
	if m == PaidOutTooMuch && !f.PaidOut {
		return CollectedWrong
	}
	if m == "" {
		return Unconfirmed
	}
	return m
}

// AtRiskByMeaning is money at risk split by what it is, exact per
// currency, each list sorted by currency and without zero totals.
type AtRiskByMeaning struct {
	PaidOutTooMuch []Total `json:"paid_out_too_much,omitempty"`
	CollectedWrong []Total `json:"collected_wrong,omitempty"`
	Unconfirmed    []Total `json:"unconfirmed,omitempty"`
}

// Of returns the totals of one meaning.
func (b AtRiskByMeaning) Of(m Meaning) []Total {
	switch m {
	case PaidOutTooMuch:
		return b.PaidOutTooMuch
	case CollectedWrong:
		return b.CollectedWrong
	case Unconfirmed:
		return b.Unconfirmed
	}
	return nil
}

// Empty reports whether no money is at risk.
func (b AtRiskByMeaning) Empty() bool {
	return len(b.PaidOutTooMuch)+len(b.CollectedWrong)+len(b.Unconfirmed) == 0
}

// SplitAtRisk sums the findings' money at risk by meaning and currency.
func SplitAtRisk(fs []Finding) AtRiskByMeaning {
	by := map[Meaning][]Money{}
	for _, f := range fs {
		m := f.Meaning()
		by[m] = append(by[m], f.AtRisk)
	}
	return AtRiskByMeaning{
		PaidOutTooMuch: SumByCurrency(by[PaidOutTooMuch]),
		CollectedWrong: SumByCurrency(by[CollectedWrong]),
		Unconfirmed:    SumByCurrency(by[Unconfirmed]),
	}
}

// Confirmed counts the transitions that confirmed an unknown outcome from
// the provider's records (CONFIRMATION_UNKNOWN → PAID), and their money
// per currency.
func Confirmed(ts []Transition) (n int, total []Total) {
	var ms []Money
	for _, t := range ts {
		if t.From == ConfirmationUnknown && t.To == Paid {
			n++
			ms = append(ms, t.Money)
		}
	}
	return n, SumByCurrency(ms)
}
