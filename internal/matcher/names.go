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

// inIDOrder reorders s, one value per object by number, into id order,
// in place: at a million objects a copy would cost 8 MB more where a
// first pass's heap stands highest.
func (w *world) inIDOrder(s []reconcile.Stamp) []reconcile.Stamp {
	if w.objSorted == nil {
		return s // numbers are id order
	}
	// The p-th in id order is s[objSorted[p]]: follow each cycle of the
	// permutation once.
	done := make([]bool, len(s))
	for p := range s {
		if done[p] {
			continue
		}
		first := s[p]
		q := p
		for {
			done[q] = true
			next := int(w.objSorted[q])
			if next == p {
				s[q] = first
				break
			}
			s[q], q = s[next], next
		}
	}
	return s
}
