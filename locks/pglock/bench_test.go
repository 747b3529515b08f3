package pglock

import (
	"context"
	"slices"
	"testing"
	"time"

	"studio/locks"
)

// BenchmarkHandoffAcrossProcesses: one engine holds a key while an engine
// on another pool (as another process: they meet only in the database)
// waits for it; the holder's fn returns, and the sample is the time from
// then to the waiter's fn starting. The holder holds 20 ms after the
// waiter queued, so a polling waiter is mid-backoff, as in real use.
// "poll": releases send no NOTIFY, the waiter polls (default 5-50 ms with
// jitter), as before this package listened; "notify": the release's
// NOTIFY wakes it. Reported: median and 90th percentile, ns/handoff, and
// the floor measured in the same iterations: the median of one
// acquisition by the waiter's store of a free key (one round trip, which
// every handoff needs after it learns the key is free).
func BenchmarkHandoffAcrossProcesses(b *testing.B) {
	for _, mode := range []string{"poll", "notify"} {
		b.Run(mode, func(b *testing.B) {
			schema := testSchema(b)
			var opts []Option
			if mode == "poll" {
				opts = append(opts, WithoutNotify())
			}
			holder := locks.New(openLockDB(b, testURL(b), schema, opts...))
			defer holder.Close()
			ws := openLockDB(b, testURL(b), schema, opts...)
			waiter := locks.New(ws)
			defer waiter.Close()
			ctx := context.Background()
			samples := make([]time.Duration, 0, b.N)
			var floors []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, ok, err := ws.Acquire(ctx, "floor", "o", time.Minute); err != nil || !ok {
					b.Fatal(ok, err)
				}
				floors = append(floors, time.Since(start))
				if _, err := ws.Release(ctx, "floor", "o"); err != nil {
					b.Fatal(err)
				}
				var released time.Time
				got := make(chan time.Duration, 1)
				err := holder.Hold(ctx, "k", func(context.Context, *locks.Lease) error {
					go func() {
						_ = waiter.Hold(ctx, "k", func(context.Context, *locks.Lease) error {
							got <- time.Since(released)
							return nil
						})
					}()
					for {
						info, err := waiter.Inspect(ctx, "k")
						if err != nil {
							return err
						}
						if info.Waiters == 1 {
							break
						}
					}
					time.Sleep(20 * time.Millisecond)
					released = time.Now()
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				samples = append(samples, <-got)
			}
			slices.Sort(samples)
			slices.Sort(floors)
			b.ReportMetric(float64(floors[len(floors)/2].Nanoseconds()), "floor-ns/acquire")
			b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "median-ns/handoff")
			b.ReportMetric(float64(samples[len(samples)*9/10].Nanoseconds()), "p90-ns/handoff")
		})
	}
}
