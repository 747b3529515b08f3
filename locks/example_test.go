package locks_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
)

func ExampleEngine_Hold() {
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()

	err := e.Hold(context.Background(), "invoice:42", func(ctx context.Context, l *locks.Lease) error {
		fmt.Println("holding", l.Key())
		return nil
	}, locks.TTL(10*time.Second), locks.Wait(time.Second))
	fmt.Println("err:", err)
	// Output:
	// holding invoice:42
	// err: <nil>
}

func ExampleEngine_TryHold() {
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	ctx := context.Background()

	_ = e.Hold(ctx, "nightly", func(ctx context.Context, _ *locks.Lease) error {
		// Someone else tries while the key is held: fn does not run.
		ran, err := e.TryHold(ctx, "nightly", func(context.Context, *locks.Lease) error {
			fmt.Println("never printed")
			return nil
		})
		fmt.Println("ran:", ran, "err:", err)
		return nil
	})
	// Output:
	// ran: false err: <nil>
}

func ExampleWait() {
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	ctx := context.Background()

	_ = e.Hold(ctx, "k", func(ctx context.Context, _ *locks.Lease) error {
		err := e.Hold(ctx, "k", func(context.Context, *locks.Lease) error { return nil },
			locks.Wait(10*time.Millisecond))
		var te *locks.TimeoutError
		fmt.Println(errors.Is(err, locks.ErrTimeout), errors.As(err, &te) && te.Key == "k")
		return nil
	})
	// Output:
	// true true
}

func ExampleSemaphore() {
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	sem := e.Semaphore(2) // at most two renders of one generator at once

	var running, most atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			_ = sem.Hold(context.Background(), "generator:sketch", func(context.Context, *locks.Lease) error {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(5 * time.Millisecond)
				running.Add(-1)
				return nil
			})
		})
	}
	wg.Wait()
	fmt.Println("never more than two:", most.Load() <= 2)
	// Output:
	// never more than two: true
}

// account is a resource that guards itself with fences: it refuses a write
// whose fence is lower than the highest it has accepted.
type account struct {
	mu      sync.Mutex
	fence   int64
	balance int
}

var errStaleFence = errors.New("stale fence: a newer holder has written")

func (a *account) write(fence int64, balance int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if fence < a.fence {
		return errStaleFence
	}
	a.fence, a.balance = fence, balance
	return nil
}

// Example_fencing shows why a holder sends its fence with its writes: a
// holder that paused past its lease comes back with an old fence, and the
// resource turns its write away instead of losing the newer holder's.
func Example_fencing() {
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	ctx := context.Background()
	var acct account

	var paused int64 // the fence of a holder that will come back too late
	_ = e.Hold(ctx, "account:7", func(_ context.Context, l *locks.Lease) error {
		paused = l.Fence()
		return acct.write(l.Fence(), 100)
	})
	_ = e.Hold(ctx, "account:7", func(_ context.Context, l *locks.Lease) error {
		return acct.write(l.Fence(), 250) // the next holder, with a larger fence
	})

	err := acct.write(paused, 999) // the late write
	fmt.Println("balance:", acct.balance)
	fmt.Println("late write:", err)
	// Output:
	// balance: 250
	// late write: stale fence: a newer holder has written
}

// Example_leaseLost shows what fn sees when its lease runs out under it:
// its context ends, context.Cause says why, and Hold reports the loss.
func Example_leaseLost() {
	clock := lockstest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := locks.New(locks.NewMemoryStoreClock(clock.Now), locks.TTL(30*time.Millisecond))
	defer e.Close()

	err := e.Hold(context.Background(), "k", func(ctx context.Context, _ *locks.Lease) error {
		clock.Advance(time.Hour) // the store's time jumps past the lease
		<-ctx.Done()             // the next renewal is refused
		fmt.Println("cause is a lost lease:", errors.Is(context.Cause(ctx), locks.ErrLeaseLost))
		return ctx.Err()
	})
	var lost *locks.LeaseLostError
	fmt.Println("Hold reports it:", errors.As(err, &lost) && lost.Key == "k")
	// Output:
	// cause is a lost lease: true
	// Hold reports it: true
}
