//go:build unix

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// shardsSizes are the single accounts BenchmarkShards passes over.
var shardsSizes = []struct {
	name string
	n    int
}{{"1M", 1_000_000}, {"100k", 100_000}, {"10k", 10_000}}

// shardsConfig is the configuration of BenchmarkShards's processes, the
// shard count filled in: one account (the platform's own), no pacing
// against the local server, and one worker working one job at a time,
// so that its peak is the largest job's.
const shardsConfig = `stripe:
  rate: 10000
workers:
  enabled: true
  slice: 24h
  fetchers: 2
  appliers: 1
  shards: %d
`

// BenchmarkShards runs one pass as jobs (--since 720h: the whole history)
// over a single account of n
// obligations (and about 1.05 n provider objects) on the Stripe test
// server (no latency, no limit), with 1, 2 and 4 shards, each on a fresh
// database with one `reconcile worker` working one job at a time.
// Reported per shard count: the pass's wall time, the worker's peak RSS
// (VmHWM; its fetch jobs each hold a day of the account, its apply jobs a
// shard: the peak is the largest shard's job), and the apply jobs' mean
// duration.
//
// Run: go test ./internal/bench -run '^$' -bench '^BenchmarkShards$/^1M$' -benchtime 1x -timeout 0
func BenchmarkShards(b *testing.B) {
	for _, size := range shardsSizes {
		b.Run(size.name, func(b *testing.B) {
			p := NewPlatform(1, size.n, time.Now().UTC().Truncate(time.Second))
			_, url := servePlatform(b, p)
			bin := command(b)
			for b.Loop() {
				b.StopTimer()
				for _, shards := range []int{1, 2, 4} {
					cfg := filepath.Join(b.TempDir(), "reconcile.yaml")
					if err := os.WriteFile(cfg, fmt.Appendf(nil, shardsConfig, shards), 0o600); err != nil {
						b.Fatal(err)
					}
					pool, dbURL := platformDatabase(b, p)
					env := workersEnv(dbURL, url)
					fleet := startWorkers(b, bin, env, cfg, 1)
					b.StartTimer()
					r := runPass(b, bin, env, cfg, "720h", true)
					b.StopTimer()
					peak := fleet.peaks()[0]
					st := stagesOf(b, pool)
					jobs := jobsBy(b, pool)[fleet.ids[0]]
					fleet.stop()
					pool.Close()
					name := fmt.Sprintf("s%d", shards)
					b.ReportMetric(r.wall.Seconds(), name+"_s")
					b.ReportMetric(float64(peak)/1024, name+"_rss_MB")
					b.ReportMetric(st["apply"].mean.Seconds(), name+"_apply_job_s")
					b.ReportMetric(st["fetch"].mean.Seconds(), name+"_fetch_job_s")
					b.ReportMetric(float64(jobs.apply), name+"_apply_jobs")
					b.Logf("%d shards: %s, worker peak %d kB, %d apply jobs of %s mean", shards, r.wall.Round(time.Millisecond), peak,
						jobs.apply, st["apply"].mean.Round(time.Millisecond))
				}
				b.ReportMetric(float64(len(p.Obligations)), "obligations")
				b.ReportMetric(float64(len(p.Objects[""])), "objects")
				b.StartTimer()
			}
		})
	}
}
