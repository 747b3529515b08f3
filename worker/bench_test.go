package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"studio/intent"
	"studio/leasequeue"
	"studio/store/sqlite"
	"studio/worker"
)

// BenchmarkDrain measures the drain rate of noop tasks (tasks/s) by one
// pool of the default concurrency (4), and by four such pools with their
// own connections, as four worker processes on one database; with SQLite's
// synchronous NORMAL and FULL (the default). Each iteration drains 2,400
// tasks in four batches of four actors.
func BenchmarkDrain(b *testing.B) {
	for _, c := range []struct {
		pools int
		sync  string
	}{{1, sqlite.SyncNormal}, {4, sqlite.SyncNormal}, {1, sqlite.SyncFull}, {4, sqlite.SyncFull}} {
		pools := c.pools
		b.Run(fmt.Sprintf("pools=%d/sync=%s", pools, c.sync), func(b *testing.B) {
			const perBatch, batches = 600, 4
			var total time.Duration
			tasks := 0
			for b.Loop() {
				b.StopTimer()
				e := newEnv(b)
				e.sync = c.sync
				var ids []string
				for i := 0; i < batches; i++ {
					nb := e.batch(spec{actor: fmt.Sprint("actor-", i), frames: perBatch, providers: []string{"noop"}, params: "{}"})
					ids = append(ids, nb.ID)
				}
				var ps []*worker.Pool
				for i := 0; i < pools; i++ {
					p, err := worker.New(worker.Config{
						Options: leasequeue.Options{
							Concurrency: leasequeue.DefaultConcurrency,
							PollMin:     time.Millisecond,
							PollMax:     10 * time.Millisecond,
						},
						Store:      e.open(),
						Generators: embedded(),
						Blobs:      e.blobs,
						SweepEvery: -1,
					})
					if err != nil {
						b.Fatal(err)
					}
					ps = append(ps, p)
				}
				b.StartTimer()
				start := time.Now()
				for _, p := range ps {
					p.Start(context.Background())
				}
				for i, id := range ids {
					waitQuiet(b, e, fmt.Sprint("actor-", i), id)
				}
				total += time.Since(start)
				b.StopTimer()
				for _, p := range ps {
					p.Stop(context.Background())
				}
				tasks += perBatch * batches
				b.StartTimer()
			}
			b.ReportMetric(float64(tasks)/total.Seconds(), "tasks/s")
		})
	}
}

// waitQuiet polls the batch until it ended, quietly and cheaply.
func waitQuiet(b *testing.B, e *env, actor, id string) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		bt, err := e.st.GetBatch(context.Background(), actor, id)
		if err != nil {
			b.Fatal(err)
		}
		if bt.Counts.Ended() == bt.TaskCount {
			if bt.State != intent.StateSucceeded {
				b.Fatalf("batch %+v", bt)
			}
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("batch never drained: %+v", bt)
		}
		// A poll, not a wait on the store's hub: the pools write through
		// stores of their own, which the hub hears only every watch
		// interval (100 ms), too coarse for the measurement's clock.
		time.Sleep(2 * time.Millisecond)
	}
}
