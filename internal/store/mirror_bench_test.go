package store

import (
	"fmt"
	"testing"
	"time"

	"reconcile"
	"reconcile/internal/bench"
)

// BenchmarkMirror times the provider mirror at 100k objects (the shared
// benchmark World's) and their keys: save (into an emptied mirror, as a
// first pass does) and load (a window of objects and of keys, as an
// incremental pass does).
//
//	go test ./internal/store -run '^$' -bench Mirror -benchtime 3x
func BenchmarkMirror(b *testing.B) {
	const n = 100_000
	e := newEnv(b, nil)
	m := NewMirror(e.pool)
	w := bench.NewWorld(n, t0())
	window := reconcile.Window{From: t0().Add(-720 * time.Hour), To: t0()}
	update := MirrorUpdate{RunID: "bench", Now: t0(), Seen: []SeenObjects{{At: t0(), Objects: w.Objects}}, Keys: w.Keys,
		Cursors: SyncCursors{Keys: window, Objects: map[reconcile.ObjectKind]reconcile.Window{
			reconcile.Charge: window, reconcile.Refund: window, reconcile.PaymentIntent: window}}}
	objects := float64(len(w.Objects))
	b.Run(fmt.Sprintf("save_%d", n), func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			e.exec(`TRUNCATE reconcile.provider_objects, reconcile.provider_keys, reconcile.sync_cursors`)
			b.StartTimer()
			if err := m.Save(b.Context(), update); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/objects, "ns/object")
	})
	b.Run(fmt.Sprintf("load_%d", n), func(b *testing.B) {
		for range b.N {
			objs, err := m.Objects(b.Context(), window, time.Time{})
			if err != nil || len(objs) != len(w.Objects) {
				b.Fatalf("Objects: %d, %v; want %d", len(objs), err, len(w.Objects))
			}
			keys, err := m.Keys(b.Context(), window)
			if err != nil || len(keys) != len(w.Keys) {
				b.Fatalf("Keys: %d, %v; want %d", len(keys), err, len(w.Keys))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/objects, "ns/object")
	})
}
