package matcher

import (
	"slices"
	"strings"
	"time"

	"reconcile"
)

// Unverified is the informational kind reconcile.Unverified: a PAID
// obligation to which nothing links, where the run could not prove absence
// either (the listing did not cover its time, or the lookup of the object
// it names failed). Reported only when Options.ReportUnverified is set.
const Unverified = reconcile.Unverified

// The buckets as small integers, named by bucketName.
const (
	bLinked uint8 = iota
	bConflict
	bSuspected
	bOrphan
	bPending
	bIgnored
)

func bucketName(b uint8) Bucket {
	return [...]Bucket{BucketLinked, BucketConflict, BucketSuspected, BucketOrphan, BucketPending, BucketIgnored}[b]
}

// Match links every provider object of in to the obligations of in,
// classifies every disagreement into findings (docs/design.md, "Findings") and decides
// the PAID transitions (docs/design.md, "The PAID rule"). It is a pure function of its
// arguments: the result does not depend on the order of any input slice,
// and duplicated input records (the same id twice) count once.
func Match(in Input, now time.Time, opts Options) Result {
	return MatchThen(in, now, opts, nil)
}

// MatchThen is Match, and calls between, when not nil, once the rules are
// done and the matcher has let go of what only they read (its indexes and
// its copy of the input's obligations), before it builds the result
// beside what is left: a caller that holds nothing else of them can
// collect the garbage there (docs/design.md, "Memory and CPU"). between
// decides nothing.
func MatchThen(in Input, now time.Time, opts Options, between func()) Result {
	m := &matcher{world: &world{in: &in, opts: opts, now: now, subject: in.Subject}}
	if m.subject == (reconcile.Window{}) {
		m.subject = in.Listed
	}
	m.indexObligations()
	m.suspected = make([]bool, m.nObls())
	m.indexObjects()
	m.groupMovements()
	m.indexLookups()
	m.linkAll()
	m.buildObligationIndex()
	// Unlinked movements first: a suspected duplicate of an obligation's
	// movement is a duplicate found for it, which keeps it from PAID.
	m.classifyUnlinked()
	m.evaluateObligations()
	// The rules have found all they look up by id or key, and all they
	// ask of the obligations: the indexes (16 to 32 MB each at a
	// million) and this call's hold on the obligations (216 MB) go
	// before the result is built beside them, which is when a first
	// pass's heap stands highest. A caller that holds no other
	// reference to them lets them die here.
	m.oblIdx, m.keyIdx, m.objIdx = index{}, index{}, index{}
	m.in.Obligations = nil
	if between != nil {
		between()
	}
	m.emit()
	return m.res
}

// emit fills the result's buckets, links and counts in object id order.
func (m *matcher) emit() {
	nLinks := 0
	for k := range m.movs {
		if n := m.nLinks(int32(k)); n > 0 {
			nLinks += n * m.members(int32(k))
		}
	}
	ids := m.objIDs
	m.res.ObjectIDs = ids
	m.res.Buckets = make([]Bucket, len(ids))
	m.res.Links = make([]reconcile.Link, 0, nLinks)
	if m.namesFrom != nil {
		m.res.NamesFrom = m.inIDOrder(m.namesFrom)
	}
	var more []reconcile.Link
	for p, id := range ids {
		k := int32(p)
		if m.objSorted != nil {
			k = m.objSorted[p]
		}
		mv := m.objMov[k]
		v := &m.movs[mv]
		m.res.Buckets[p] = bucketName(v.bucket)
		if v.bucket == bLinked {
			m.res.Counts.Linked++
		}
		if v.link.obl < 0 {
			continue
		}
		first := reconcile.Link{ObjectID: id, ObligationID: m.oblIDs[v.link.obl], Route: routeName(v.link.route)}
		if !v.conflict {
			m.res.Links = append(m.res.Links, first)
			continue
		}
		more = append(more[:0], first)
		for _, l := range m.more[mv] {
			more = append(more, reconcile.Link{ObjectID: id, ObligationID: m.oblIDs[l.obl], Route: routeName(l.route)})
		}
		slices.SortFunc(more, func(a, b reconcile.Link) int { return strings.Compare(a.ObligationID, b.ObligationID) })
		m.res.Links = append(m.res.Links, more...)
	}
	m.settle()
	m.res.Counts.Obligations = len(m.res.ObligationIDs)
	m.res.Counts.ProviderObjects = len(ids)

	// Transitions were decided in obligation id order: already sorted.
	slices.SortFunc(m.res.Findings, reconcile.CompareFindings)
	if m.res.Findings == nil {
		m.res.Findings = []reconcile.Finding{}
	}
	if m.res.Transitions == nil {
		m.res.Transitions = []reconcile.Transition{}
	}
}

// settle fills the result's lists of what the run decided on and settled:
// obligations not read only to link, those of them whose records were all
// read, and the objects it decided on: those created in the subject, and
// those retrieved by id (outside the listing) that link to an obligation
// it decided on. One read as evidence (listed, outside the subject) or
// retrieved for an obligation it does not link to (a refund's target)
// could hide what an earlier run found of it: a duplicate of an
// obligation this run never read. They share the id slices where nothing
// is left out.
func (m *matcher) settle() {
	decided := m.oblIDs
	if m.context != nil {
		decided = make([]string, 0, len(m.oblIDs))
		for i, id := range m.oblIDs {
			if !m.context[i] {
				decided = append(decided, id)
			}
		}
	}
	m.res.ObligationIDs = decided
	m.res.Settled.Obligations = decided
	if len(m.partial) > 0 {
		m.res.Settled.Obligations = make([]string, 0, len(decided)-len(m.partial))
		for _, id := range decided {
			if _, partial := slices.BinarySearch(m.partial, id); !partial {
				m.res.Settled.Obligations = append(m.res.Settled.Obligations, id)
			}
		}
	}
	ids := m.res.ObjectIDs
	m.res.Settled.Objects = ids
	// Each object in id order: settled, read as evidence, or retrieved
	// and undecided.
	unsettled := func(p int) (evidence, retrieved bool) {
		k := int32(p)
		if m.objSorted != nil {
			k = m.objSorted[p]
		}
		switch c := m.obj(k).Created.Time(); {
		case m.subject.Contains(c):
			return false, false
		case m.in.Listed.Contains(c):
			return true, false
		}
		return false, !m.linksDecided(m.objMov[k])
	}
	n := 0
	for p, id := range ids {
		evidence, retrieved := unsettled(p)
		if evidence {
			n++
		} else if retrieved {
			m.res.Undecided = append(m.res.Undecided, id)
		}
	}
	if n+len(m.res.Undecided) == 0 {
		return
	}
	m.res.Settled.Objects = make([]string, 0, len(ids)-n-len(m.res.Undecided))
	for p, id := range ids {
		if evidence, retrieved := unsettled(p); !evidence && !retrieved {
			m.res.Settled.Objects = append(m.res.Settled.Objects, id)
		}
	}
}

// linksDecided reports whether movement mv (-1: none) links to an
// obligation the run decided on (not read only to link).
func (m *matcher) linksDecided(mv int32) bool {
	if mv < 0 {
		return false
	}
	decided := func(o int32) bool { return o >= 0 && (m.context == nil || !m.context[o]) }
	if decided(m.movs[mv].link.obl) {
		return true
	}
	return slices.ContainsFunc(m.more[mv], func(l mlink) bool { return decided(l.obl) })
}

func (m *matcher) add(kind reconcile.FindingKind, oblID, objectID string, ids []string, money, atRisk reconcile.Money, detail string) {
	if ids == nil {
		ids = []string{}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	m.res.Findings = append(m.res.Findings, reconcile.Finding{
		Account:      m.in.Account.ID,
		AccountName:  m.in.Account.Name,
		Kind:         kind,
		Severity:     kind.Severity(),
		ObligationID: oblID,
		ProviderIDs:  ids,
		Money:        money,
		AtRisk:       atRisk,
		Fingerprint:  reconcile.AccountFingerprint(m.in.Account.ID, kind, oblID, objectID),
		ContentHash:  reconcile.ContentHash(atRisk, ids),
		Detail:       detail,
	})
}
