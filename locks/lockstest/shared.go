package lockstest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"studio/locks"
)

// Tests that need more than a Fixture: a store on its own clock, or two
// stores on the same data. A store's test file calls them itself.

// ShortLeasesEnd checks a store on its own clock (the database's, the
// server's; no Fixture clock): a lock and a slot taken for 20 ms are over
// once 40 ms have passed. Their owner can no longer renew them and another
// owner takes both. expired, if not nil, runs once they are over, before
// anything touches the key: to check what the store itself drops then.
func ShortLeasesEnd(t *testing.T, s locks.Store, expired func()) {
	t.Helper()
	const ttl = 20 * time.Millisecond
	mustAcquire(t, s, "short", "a", ttl)
	if _, ok := acquireSlot(t, s, "short", "a", 1, ttl); !ok {
		t.Fatal("AcquireSlot of a free key refused")
	}
	// The store's clock has to move past the leases' end: time passing is
	// the point, and no event tells when it has.
	time.Sleep(2 * ttl)
	if expired != nil {
		expired()
	}
	if renew(t, s, "short", "a", long) {
		t.Fatal("Renew after expiry succeeded")
	}
	mustAcquire(t, s, "short", "b", long)
	if _, ok := acquireSlot(t, s, "short", "b", 1, long); !ok {
		t.Fatal("AcquireSlot after expiry refused")
	}
}

// EnginesExclude runs two engines, each on a store of its own from open
// (as two processes on the same data), that meet only in the store: eight
// goroutines take the lock "plan" and a slot of the semaphore "gen" of
// limit 2 in turn, eight times each. It fails if two hold the lock at
// once, if a fence does not grow, or if more than two hold the semaphore.
func EnginesExclude(t *testing.T, open func(t *testing.T) locks.Store) {
	t.Helper()
	var engines []*locks.Engine
	for range 2 {
		e := locks.New(open(t), locks.PollInterval(time.Millisecond, 5*time.Millisecond))
		t.Cleanup(func() { e.Close() })
		engines = append(engines, e)
	}
	var (
		inside, slots, most atomic.Int64
		mu                  sync.Mutex // for the race detector: the store orders the holders
		last                int64
		wg                  sync.WaitGroup
	)
	// Each holder stays a moment, so that holders overlap if the store
	// lets them: a sleep, as it models work.
	const work = 100 * time.Microsecond
	for i := range 8 {
		e := engines[i%2]
		sem := e.Semaphore(2)
		wg.Go(func() {
			for range 8 {
				err := e.Hold(context.Background(), "plan", func(_ context.Context, l *locks.Lease) error {
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d holders of one lock at once", n)
					}
					mu.Lock()
					if l.Fence() <= last {
						t.Errorf("fence %d after %d", l.Fence(), last)
					}
					last = l.Fence()
					mu.Unlock()
					time.Sleep(work)
					inside.Add(-1)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				err = sem.Hold(context.Background(), "gen", func(context.Context, *locks.Lease) error {
					n := slots.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(work)
					slots.Add(-1)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if n := most.Load(); n > 2 {
		t.Fatalf("%d semaphore holders at once, limit 2", n)
	}
}
