package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"studio/store"
	"studio/store/storetest"
)

// BenchmarkCreateDuringPrune: the time of a 12-task create while a prune
// deletes 100k tasks (167 ended batches of 600), beside the same creates
// with no prune, in one run. It reports the median and the worst of each
// (create_ms_p50, create_ms_max; prune_ create_ms_p50, prune_create_ms_max):
// a prune holds the write lock for one batch at a time, so a create waits
// for at most one batch's deletion.
func BenchmarkCreateDuringPrune(b *testing.B) {
	ctx := context.Background()
	for range b.N {
		s := open(b, filepath.Join(b.TempDir(), "studio.db"))
		for i := range 167 {
			in := storetest.Intent(b, "alice", fmt.Sprint("old-", i), "fp", 600)
			if _, _, err := s.CreateIntent(ctx, in); err != nil {
				b.Fatal(err)
			}
			if _, err := s.CancelBatch(ctx, "alice", in.Batch.ID); err != nil {
				b.Fatal(err)
			}
		}
		creates := func(prefix string, until func() bool) []time.Duration {
			var ds []time.Duration
			for i := 0; !until() || len(ds) < 20; i++ {
				in := storetest.Intent(b, "bob", fmt.Sprint(prefix, i), "fp", 12)
				t0 := time.Now()
				if _, _, err := s.CreateIntent(ctx, in); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
			}
			return ds
		}
		alone := creates("alone-", func() bool { return true })
		done := make(chan store.Deleted)
		go func() {
			d, err := store.Prune(ctx, s, store.PruneParams{Before: time.Now().Add(time.Second)})
			if err != nil {
				b.Error(err)
			}
			done <- d
		}()
		var d store.Deleted
		finished := false
		during := creates("during-", func() bool {
			select {
			case d = <-done:
				finished = true
			default:
			}
			return finished
		})
		if !finished {
			d = <-done
		}
		if d.Tasks < 100000 {
			b.Fatalf("pruned %d tasks, want 100200", d.Tasks)
		}
		report := func(name string, ds []time.Duration) {
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"_ms_p50")
			b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, name+"_ms_max")
		}
		report("create", alone)
		report("prune_create", during)
	}
}
