package runner

import (
	"reconcile"
	"reconcile/internal/store"
)

// SetDirtyFault breaks the dirty set of incremental matching until the
// returned func restores it.
func SetDirtyFault(f func(q *store.Related, obs *[]reconcile.Obligation)) (restore func()) {
	dirtyFault = f
	return func() { dirtyFault = nil }
}

// SetRetrievedFault leaves what incremental matching retrieves by id out
// of its closure until the returned func restores it.
func SetRetrievedFault() (restore func()) {
	retrievedFault = true
	return func() { retrievedFault = false }
}
