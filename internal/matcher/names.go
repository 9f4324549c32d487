package matcher

import "reconcile"

// What an object names from before it (docs/design.md, "Incremental
// matching"). A pass decides on every obligation a record created in its
// window names (by the object's id as the obligation's provider or target
// id, by the object's metadata, by the keys its key evidence tells), and
// reads the provider back to the oldest of them (Options.CoverFrom). Of
// those, the only ones its scope does not hold already are settled and
// were created and last written before the window began, so before the
// record was created. NamesFrom keeps, per object, the creation time of
// the oldest such obligation, so that a later pass that does not read the
// record still reads back as far as one that does.

// mayReach reports whether obligation o can be out of the scope of a
// window holding a record that names it: it is settled (an unsettled one
// is in every pass's scope).
func (m *matcher) mayReach(o *reconcile.Obligation) bool { return !o.Unsettled() }

// names records that object obj (-1: none) names obligation i: if i was
// settled, created and last written before obj was created, and is the
// oldest such yet, obj's NamesFrom is i's creation.
func (m *matcher) names(obj, i int32) {
	if obj < 0 {
		return
	}
	o := m.obl(i)
	created := m.obj(obj).Created
	if !m.mayReach(o) || o.CreatedAt.IsZero() || o.CreatedAt >= created || o.UpdatedAt >= created {
		return
	}
	if m.namesFrom == nil {
		m.namesFrom = make([]reconcile.Stamp, m.nObjs())
	}
	if r := m.namesFrom[obj]; r.IsZero() || o.CreatedAt < r {
		m.namesFrom[obj] = o.CreatedAt
	}
}
