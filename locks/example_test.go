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
				time.Sleep(5 * time.Millisecond) // the render
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

// ExampleEngine_Inspect looks at a key from outside: who holds it (fences
// and time left by the store's clock, never owners) and how many callers
// of this engine wait for it.
func ExampleEngine_Inspect() {
	clock := lockstest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := locks.New(locks.NewMemoryStoreClock(clock.Now), locks.TTL(time.Minute))
	defer e.Close()
	ctx := context.Background()

	info, _ := e.Inspect(ctx, "report")
	fmt.Println("before:", "held", info.Held, "free", info.Free)

	_ = e.Hold(ctx, "report", func(ctx context.Context, l *locks.Lease) error {
		clock.Advance(20 * time.Second)
		info, err := e.Inspect(ctx, "report")
		if err != nil {
			return err
		}
		h := info.Holders[0]
		fmt.Println("inside:", "held", info.Held, "free", info.Free, "fence is mine", h.Fence == l.Fence(), "left", h.Left, "waiters", info.Waiters)
		return nil
	})
	// Output:
	// before: held false free true
	// inside: held true free false fence is mine true left 40s waiters 0
}

// ExampleEngine_Lock makes a named lock with its own defaults, then holds
// one id of it: each chat is summarized by one holder at a time, and
// different chats in parallel.
func ExampleEngine_Lock() {
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	ctx := context.Background()

	summaries := e.Lock("summaries", locks.TTL(30*time.Second), locks.Wait(time.Minute))
	err := summaries.Hold(ctx, "chat-42", func(ctx context.Context, l *locks.Lease) error {
		// Another chat is another key: free.
		ran, _ := summaries.TryHold(ctx, "chat-43", func(context.Context, *locks.Lease) error { return nil })
		fmt.Println("key:", l.Key(), "| other chat free:", ran)
		// The same chat is not.
		ran, _ = summaries.TryHold(ctx, "chat-42", func(context.Context, *locks.Lease) error { return nil })
		fmt.Println("same chat free:", ran)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// key: 9:summaries:chat-42 | other chat free: true
	// same chat free: false
	// err: <nil>
}

// ExampleSemaphore_Lock is the named form of a semaphore: up to two
// renders per generator, whatever the generator.
func ExampleSemaphore_Lock() {
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	ctx := context.Background()

	renders := e.Semaphore(2).Lock("renders")
	_ = renders.Hold(ctx, "sketch", func(ctx context.Context, _ *locks.Lease) error {
		info, _ := renders.Inspect(ctx, "sketch")
		fmt.Println("holders:", len(info.Holders), "of", info.Limit, "free:", info.Free)
		return nil
	})
	// Output:
	// holders: 1 of 2 free: true
}

// ExampleCheckLimit shows the edges of semaphore limits: a limit below 1
// fails when the semaphore is made (check one from outside first), and a
// key has one limit at a time.
func ExampleCheckLimit() {
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	ctx := context.Background()

	fmt.Println(locks.CheckLimit(0))

	_ = e.Semaphore(2).Hold(ctx, "gpu", func(ctx context.Context, _ *locks.Lease) error {
		err := e.Semaphore(3).Hold(ctx, "gpu", func(context.Context, *locks.Lease) error { return nil })
		fmt.Println("another limit on a held key:", errors.Is(err, locks.ErrLimitConflict))
		return nil
	})
	// Output:
	// locks: invalid argument: semaphore limit 0, at least 1 allowed
	// another limit on a held key: true
}

// ExampleWait_zero shows that Hold with Wait(0) and TryHold agree on "not
// now": where TryHold answers false, Hold fails with a *TimeoutError.
func ExampleWait_zero() {
	e := locks.New(locks.NewMemoryStore())
	defer e.Close()
	ctx := context.Background()
	noop := func(context.Context, *locks.Lease) error { return nil }

	_ = e.Hold(ctx, "k", func(ctx context.Context, _ *locks.Lease) error {
		ran, err := e.TryHold(ctx, "k", noop)
		fmt.Println("TryHold:", ran, err)
		err = e.Hold(ctx, "k", noop, locks.Wait(0))
		fmt.Println("Wait(0):", errors.Is(err, locks.ErrTimeout))
		return nil
	})
	// Output:
	// TryHold: false <nil>
	// Wait(0): true
}
