package locks_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"studio/locks"
)

// BenchmarkUncontended compares one Hold of a no-op fn on a free key with
// the floor, a sync.Mutex Lock and Unlock, in the same run.
func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	noop := func(context.Context, *locks.Lease) error { return nil }
	b.Run("floor=sync.Mutex", func(b *testing.B) {
		var mu sync.Mutex
		for b.Loop() {
			mu.Lock()
			//lint:ignore SA2001 the empty section is the point: it is the floor
			mu.Unlock()
		}
	})
	// The parts every Hold must do, without the engine: an owner (a
	// prefix and a counter in hex), a clock reading, a look-up of the
	// key's queue, and the store's acquire and release. fn's context and
	// the store calls' context are not among them.
	b.Run("floor=parts", func(b *testing.B) {
		s := locks.NewMemoryStore()
		queues := map[string]*struct{ held int }{"k": {}}
		var raw [16]byte
		binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(raw[8:], rand.Uint64())
		prefix := hex.EncodeToString(raw[:])
		var n uint64
		for b.Loop() {
			n++
			var buf [48]byte
			owner := string(strconv.AppendUint(append(buf[:0], prefix...), n, 16))
			_ = time.Now()
			queues["k"].held++
			if _, ok, err := s.Acquire(ctx, "k", owner, time.Minute); !ok || err != nil {
				b.Fatal(ok, err)
			}
			if ok, err := s.Release(ctx, "k", owner); !ok || err != nil {
				b.Fatal(ok, err)
			}
			queues["k"].held--
		}
	})
	b.Run("memory/store", func(b *testing.B) {
		s := locks.NewMemoryStore()
		for b.Loop() {
			if _, ok, err := s.Acquire(ctx, "k", "owner", time.Minute); !ok || err != nil {
				b.Fatal(ok, err)
			}
			if ok, err := s.Release(ctx, "k", "owner"); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("memory/Hold", func(b *testing.B) {
		e := locks.New(locks.NewMemoryStore())
		defer e.Close()
		for b.Loop() {
			if err := e.Hold(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	// As a server calls it: under a request's context, which can be
	// canceled.
	b.Run("memory/Hold-cancelable-ctx", func(b *testing.B) {
		e := locks.New(locks.NewMemoryStore())
		defer e.Close()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for b.Loop() {
			if err := e.Hold(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("memory/TryHold", func(b *testing.B) {
		e := locks.New(locks.NewMemoryStore())
		defer e.Close()
		for b.Loop() {
			if ran, err := e.TryHold(ctx, "k", noop); !ran || err != nil {
				b.Fatal(ran, err)
			}
		}
	})
	b.Run("memory/Semaphore", func(b *testing.B) {
		e := locks.New(locks.NewMemoryStore())
		defer e.Close()
		sem := e.Semaphore(4)
		for b.Loop() {
			if err := sem.Hold(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandoff measures the time from one holder's end to the next
// holder running, with 8 waiters always queued (9 goroutines taking turns),
// as ns/handoff; only turns that pass to another goroutine count, and
// handoffs/op says how many did. The floors: sync.Mutex (which lets the
// goroutine that just unlocked take it again, so it hands off rarely) and a
// channel holding one token (FIFO, a handoff every time, as the engine).
func BenchmarkHandoff(b *testing.B) {
	b.Run("floor=sync.Mutex", func(b *testing.B) {
		var mu sync.Mutex
		handoff(b, func(fn func()) error {
			mu.Lock()
			defer mu.Unlock()
			fn()
			return nil
		})
	})
	b.Run("floor=chan", func(b *testing.B) {
		token := make(chan struct{}, 1)
		handoff(b, func(fn func()) error {
			token <- struct{}{}
			defer func() { <-token }()
			fn()
			return nil
		})
	})
	b.Run("memory/Hold", func(b *testing.B) {
		e := locks.New(locks.NewMemoryStore())
		defer e.Close()
		handoff(b, func(fn func()) error {
			return e.Hold(context.Background(), "k", func(context.Context, *locks.Lease) error {
				fn()
				return nil
			})
		})
	})
}

// HandoffWaiters is how many goroutines wait while one holds.
const HandoffWaiters = 8

// handoff runs b.N holds over HandoffWaiters+1 goroutines. Each holder
// notes how long ago the previous holder ended its section, if that was
// another goroutine, and marks its own end just before leaving.
func handoff(b *testing.B, hold func(fn func()) error) {
	var (
		remaining atomic.Int64
		// Written and read only inside the section.
		ended    time.Time
		previous = -1
		total    time.Duration
		count    int64
		wg       sync.WaitGroup
	)
	remaining.Store(int64(b.N))
	b.ResetTimer()
	for id := range HandoffWaiters + 1 {
		wg.Go(func() {
			for remaining.Add(-1) >= 0 {
				err := hold(func() {
					now := time.Now()
					if previous != id && previous >= 0 {
						total += now.Sub(ended)
						count++
					}
					previous = id
					ended = time.Now()
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if count > 0 {
		b.ReportMetric(float64(total.Nanoseconds())/float64(count), "ns/handoff")
	}
	b.ReportMetric(float64(count)/float64(b.N), "handoffs/op")
}
