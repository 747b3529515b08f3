package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
	"studio/store/postgres"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

// BenchmarkChangeStamp is the cost of migration 0006's trigger on the
// drain path: BenchmarkDrainOneBatch's drain of a 600-task batch by g
// claimers, on a schema with the trigger and on one where it was dropped,
// alternating (which goes first swaps every round), so that a noisy
// machine slows both alike. It reports each side's tasks/s and their ratio
// (unstamped time over stamped time: below 1 means the stamp costs).
func BenchmarkChangeStamp(b *testing.B) {
	for _, g := range []int{1, 4} {
		b.Run(fmt.Sprintf("claimers=%d", g), func(b *testing.B) {
			ctx := context.Background()
			open := func() *postgres.Store {
				u, _ := pgtest.Schema(b)
				s, err := postgres.Open(ctx, postgres.Config{URL: u, MaxConns: int32(g + 1)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				return s
			}
			stamped, unstamped := open(), open()
			if _, err := unstamped.Pool().Exec(ctx, `DROP TRIGGER tasks_stamp_change ON tasks`); err != nil {
				b.Fatal(err)
			}
			var took [2]time.Duration
			n := 0
			for b.Loop() {
				sides := []int{0, 1}
				if n%2 == 1 {
					sides = []int{1, 0}
				}
				for _, side := range sides {
					s := map[int]*postgres.Store{0: stamped, 1: unstamped}[side]
					b.StopTimer()
					if _, _, err := s.CreateIntent(ctx, storetest.Intent(b, "alice", fmt.Sprint("drain-", n), "fp", 600)); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					took[side] += drainOnce(b, s, g)
				}
				n++
			}
			b.ReportMetric(float64(600*n)/took[0].Seconds(), "stamped-tasks/s")
			b.ReportMetric(float64(600*n)/took[1].Seconds(), "unstamped-tasks/s")
			b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "ratio")
		})
	}
}

// drainOnce drains the queued tasks with g claimers (claim 4, complete
// them, again) and answers how long it took.
func drainOnce(b *testing.B, s *postgres.Store, g int) time.Duration {
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range g {
		wg.Go(func() {
			for {
				cs, err := s.ClaimTasks(ctx, store.ClaimParams{Owner: fmt.Sprint("w", w), Limit: 4, TTL: time.Minute})
				if err != nil {
					b.Error(err)
					return
				}
				if len(cs) == 0 {
					return
				}
				done := make([]store.Completion, len(cs))
				for j, c := range cs {
					id, err := intent.NewID()
					if err != nil {
						b.Error(err)
						return
					}
					done[j] = store.Completion{Lease: c.Lease, Asset: intent.Asset{
						ID: id, SHA256: strings.Repeat("c", 64), ContentType: "image/png", Size: 1, Width: 1, Height: 1}}
				}
				if _, err := s.CompleteTasks(ctx, done); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}
