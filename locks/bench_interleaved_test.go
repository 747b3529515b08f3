package locks_test

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"studio/locks"
)

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's CPU time.
const rusageThread = 1

// threadCPU is the CPU time this thread has used, or 0 where the system
// cannot say (the figure is then not reported).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHoldInterleaved times an uncontended memory-store Hold of a
// no-op fn, a Semaphore(4).Hold, and the floor, a sync.Mutex Lock and
// Unlock, in alternating
// batches of 2000 in one goroutine locked to its thread: on a loaded
// machine both see the same load. Reported per operation, the medians over
// the batches: wall-ns (wall clock) and cpu-ns (this thread's CPU time,
// which leaves out the time the thread waited for a core, and the garbage
// collector's background work on other threads). One op is one round of
// the three batches.
func BenchmarkHoldInterleaved(b *testing.B) {
	const batch = 2000
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx := context.Background()
	noop := func(context.Context, *locks.Lease) error { return nil }
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	sem := e.Semaphore(4)
	var mu sync.Mutex
	var holdWall, holdCPU, semWall, semCPU, floorWall, floorCPU []float64
	measure := func(fn func()) (wall, cpu float64) {
		c0, t0 := threadCPU(), time.Now()
		for range batch {
			fn()
		}
		return float64(time.Since(t0).Nanoseconds()) / batch, float64((threadCPU() - c0).Nanoseconds()) / batch
	}
	for b.Loop() {
		w, c := measure(func() {
			if err := e.Hold(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		})
		holdWall, holdCPU = append(holdWall, w), append(holdCPU, c)
		w, c = measure(func() {
			if err := sem.Hold(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		})
		semWall, semCPU = append(semWall, w), append(semCPU, c)
		w, c = measure(func() {
			mu.Lock()
			//lint:ignore SA2001 the empty section is the point: it is the floor
			mu.Unlock()
		})
		floorWall, floorCPU = append(floorWall, w), append(floorCPU, c)
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(holdWall), "hold-wall-ns")
	b.ReportMetric(median(holdCPU), "hold-cpu-ns")
	b.ReportMetric(median(semWall), "sem-wall-ns")
	b.ReportMetric(median(semCPU), "sem-cpu-ns")
	b.ReportMetric(median(floorWall), "mutex-wall-ns")
	b.ReportMetric(median(floorCPU), "mutex-cpu-ns")
}
