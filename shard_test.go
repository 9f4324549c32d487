package reconcile_test

import (
	"fmt"
	"testing"

	"reconcile"
)

func TestShardOfSpreadsAndIsStable(t *testing.T) {
	// The hash is part of the stored state's meaning (a part owns the
	// findings that hash to it): it must not change between versions.
	if got := reconcile.ShardOf("obl_1", 1000003); got != 772001 {
		t.Fatalf("ShardOf(obl_1) moved to %d: stored parts would change owners", got)
	}
	if reconcile.ShardOf("anything", 1) != 0 || reconcile.ShardOf("anything", 0) != 0 {
		t.Fatal("one shard is shard 0")
	}
	// Ids that differ in their last bytes, as a table's usually do,
	// spread evenly over any count of shards.
	for _, n := range []int{2, 3, 4, 7, 16} {
		counts := make([]int, n)
		for i := range 16000 {
			counts[reconcile.ShardOf(fmt.Sprintf("obl_%d", i), n)]++
		}
		for k, c := range counts {
			if want := 16000 / n; c < want*9/10 || c > want*11/10 {
				t.Fatalf("of %d shards, shard %d holds %d of 16000: %v", n, k, c, counts)
			}
		}
	}
}

func TestFindingShard(t *testing.T) {
	of := reconcile.Finding{ObligationID: "obl_7", ProviderIDs: []string{"ch_9"}}
	if reconcile.FindingShard(of, 5) != reconcile.ShardOf("obl_7", 5) {
		t.Fatal("an obligation's finding is its obligation's shard's")
	}
	orphan := reconcile.Finding{ProviderIDs: []string{"pi_2", "ch_1"}}
	if reconcile.FindingShard(orphan, 5) != reconcile.ShardOf("ch_1", 5) {
		t.Fatal("an orphan is the shard of its least provider id")
	}
}
