package reconcile

import (
	"hash/fnv"
	"math/bits"
	"slices"
)

// Shards split one Stripe account's share of a pass run as jobs into
// parts of bounded size (docs/design.md, "Shards"). A shard owns the
// obligations whose id hashes to it and the provider objects whose id
// does; what a finding is about decides whose it is (FindingShard).

// ShardOf is the shard of n (numbered from 0) that id hashes to: the
// FNV-1a hash of the id, mixed by MurmurHash3's 64-bit finaliser (FNV
// alone leaves ids that differ in their last bytes close together in its
// high bits and alternating in its low ones), scaled to [0, n) by its
// high bits (h·n / 2⁶⁴). One shard (n ≤ 1) is shard 0.
func ShardOf(id string, n int) int {
	if n <= 1 {
		return 0
	}
	f := fnv.New64a()
	_, _ = f.Write([]byte(id))
	h := f.Sum64()
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
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
