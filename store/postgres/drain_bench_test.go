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

// BenchmarkDrainOneBatch drains one 600-task batch with g claimers at once
// (claim 4, complete the 4, again), each on its own connection, with no
// work between claim and completion: what the store itself allows a
// single batch, without the generator's or the blob store's costs. Read
// tasks/s of g > 1 against g = 1, from the same run.
func BenchmarkDrainOneBatch(b *testing.B) {
	for _, g := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("claimers=%d", g), func(b *testing.B) {
			u, _ := pgtest.Schema(b)
			s, err := postgres.Open(context.Background(), postgres.Config{URL: u, MaxConns: int32(g + 1)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			var busy time.Duration
			for i := range b.N {
				b.StopTimer()
				if _, _, err := s.CreateIntent(ctx, storetest.Intent(b, "alice", fmt.Sprint("drain-", i), "fp", 600)); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
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
							res, err := s.CompleteLeases(ctx, done)
							if err != nil {
								b.Error(err)
								return
							}
							for _, r := range res {
								if r.Err != nil {
									b.Error(r.Err)
									return
								}
							}
						}
					})
				}
				wg.Wait()
				busy += time.Since(start)
			}
			b.ReportMetric(float64(600*b.N)/busy.Seconds(), "tasks/s")
		})
	}
}
