package reconcile

import (
	"hash/fnv"
	"slices"
)

// Shards split one Stripe account's share of a pass run as jobs into
// parts of bounded size (docs/design.md, "Shards"). A shard owns the
// obligations whose id hashes to it and the provider objects whose id
// does; what a finding is about decides whose it is (FindingShard).

// ShardOf is the shard of n (numbered from 0) that id hashes to: FNV-1a
// of the id, modulo n. One shard (n ≤ 1) is shard 0.
func ShardOf(id string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum64() % uint64(n))
}

// FindingShard is the shard of n that finding f belongs to: its
// obligation's, or, for a finding about objects alone (an orphan), the
// shard of the least of its provider ids.
func FindingShard(f Finding, n int) int {
	if f.ObligationID != "" || len(f.ProviderIDs) == 0 {
		return ShardOf(f.ObligationID, n)
	}
	return ShardOf(slices.Min(f.ProviderIDs), n)
}
