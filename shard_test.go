package reconcile_test

import (
	"fmt"
	"testing"

	"reconcile"
)

func TestShardOfSpreadsAndIsStable(t *testing.T) {
	// The hash is part of the stored state's meaning (a part owns the
	// findings that hash to it): it must not change between versions.
	if got := reconcile.ShardOf("obl_1", 1000003); got != 250214 {
		t.Fatalf("ShardOf(obl_1) moved to %d: stored parts would change owners", got)
	}
	if reconcile.ShardOf("anything", 1) != 0 || reconcile.ShardOf("anything", 0) != 0 {
		t.Fatal("one shard is shard 0")
	}
	counts := make([]int, 4)
	for i := range 4000 {
		counts[reconcile.ShardOf(fmt.Sprintf("obl_%d", i), 4)]++
	}
	for k, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("shard %d holds %d of 4000: %v", k, c, counts)
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
