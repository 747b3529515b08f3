package locks

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// panics runs fn and returns the error it panicked with (nil if none).
func panics(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err, _ = r.(error)
			if err == nil {
				err = errors.New("panic without an error")
			}
		}
	}()
	fn()
	return nil
}

// TestSemaphoreLimitFailsWhenMade: a limit below 1 fails at Semaphore, not
// at each hold; CheckLimit tells the same beforehand.
func TestSemaphoreLimitFailsWhenMade(t *testing.T) {
	e := New(NewMemoryStore())
	defer e.Close()
	for _, n := range []int{0, -1} {
		if err := panics(func() { e.Semaphore(n) }); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Semaphore(%d) panicked with %v, want ErrInvalid", n, err)
		}
		if err := CheckLimit(n); !errors.Is(err, ErrInvalid) {
			t.Fatalf("CheckLimit(%d) = %v, want ErrInvalid", n, err)
		}
	}
	if err := panics(func() { e.Semaphore(1) }); err != nil || CheckLimit(1) != nil {
		t.Fatalf("Semaphore(1): %v, CheckLimit(1): %v", err, CheckLimit(1))
	}
}

// TestLimitConflict: a semaphore key held under one limit refuses a hold
// under another with ErrLimitConflict, at once, without waiting.
func TestLimitConflict(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	release := holdOpenSem(t, e.Semaphore(2), "gen")
	err := e.Semaphore(3).Hold(t.Context(), "gen", func(context.Context, *Lease) error {
		t.Error("fn ran under a conflicting limit")
		return nil
	}, Wait(time.Minute))
	if !errors.Is(err, ErrLimitConflict) {
		t.Fatalf("Hold under limit 3 while held under 2: %v, want ErrLimitConflict", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := e.Semaphore(3).Hold(t.Context(), "gen", func(context.Context, *Lease) error { return nil }); err != nil {
		t.Fatalf("Hold under limit 3 once free: %v", err)
	}
	assertIdle(t, e, m)
}

func holdOpenSem(t *testing.T, s *Semaphore, key string) (release func() error) {
	t.Helper()
	running, stop := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Hold(context.Background(), key, func(ctx context.Context, l *Lease) error {
			close(running)
			<-stop
			return nil
		})
	}()
	select {
	case <-running:
	case err := <-done:
		t.Fatalf("background Hold(%q) returned before running: %v", key, err)
	}
	return func() error { close(stop); return <-done }
}

// TestInspect: free, held here with its fence and time left, waiters of
// this engine counted, a semaphore's slots and limit; owners nowhere.
func TestInspect(t *testing.T) {
	clock := newTestClock()
	m := NewMemoryStoreClock(clock.Now)
	e := New(m, TTL(time.Hour))
	defer e.Close()
	ctx := t.Context()

	info, err := e.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Held || !info.Free || len(info.Holders) != 0 || info.Limit != 1 || info.Semaphore || info.Key != "k" || !info.StoreTime.Equal(clock.Now()) {
		t.Fatalf("free key: %+v", info)
	}

	var fence int64
	running, stop := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Hold(context.Background(), "k", func(ctx context.Context, l *Lease) error {
			fence = l.Fence()
			close(running)
			<-stop
			return nil
		})
	}()
	<-running
	clock.Advance(time.Minute)
	waiters := make(chan error, 2)
	for range 2 {
		go func() {
			waiters <- e.Hold(context.Background(), "k", func(context.Context, *Lease) error { return nil })
		}()
	}
	waitFor(t, "two waiters", func() bool { return waiting(e, false, "k") == 2 })
	info, err = e.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Free || info.Waiters != 2 || info.HeldHere != 1 || len(info.Holders) != 1 ||
		info.Holders[0].Fence != fence || info.Holders[0].Left != time.Hour-time.Minute {
		t.Fatalf("held key with two waiters: %+v", info)
	}
	close(stop)
	for _, c := range []chan error{done, waiters, waiters} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}

	sem := e.Semaphore(3)
	release := holdOpenSem(t, sem, "k")
	for _, inspect := range []func() (Info, error){
		func() (Info, error) { return sem.Inspect(ctx, "k") },
		func() (Info, error) { return e.InspectSemaphore(ctx, "k") },
	} {
		info, err := inspect()
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || !info.Free || !info.Semaphore || info.Limit != 3 || len(info.Holders) != 1 || info.HeldHere != 1 {
			t.Fatalf("semaphore with one of three held: %+v", info)
		}
	}
	if info, err := e.Inspect(ctx, "k"); err != nil || info.Held {
		t.Fatalf("the lock k while the semaphore k is held: %+v, %v; want free", info, err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if info, err := e.InspectSemaphore(ctx, "k"); err != nil || info.Held || info.Limit != 0 || !info.Free {
		t.Fatalf("free semaphore of unknown limit: %+v, %v", info, err)
	}
	if _, err := e.Inspect(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Inspect of an empty key: %v", err)
	}
	assertIdle(t, e, m)
}

// TestKeyOfNeverCollides: over random names and ids built from separators,
// digits and look-alikes, KeyOf(a, b) == KeyOf(c, d) only when a == c and
// b == d.
func TestKeyOfNeverCollides(t *testing.T) {
	pieces := []string{"", ":", "1", "9", "0", "a", "é", "\x00", "/", "::", "12:"}
	rng := rand.New(rand.NewPCG(5, 11))
	word := func() string {
		var b strings.Builder
		for range rng.IntN(5) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	seen := map[string][2]string{}
	for range 200000 {
		name, id := word(), word()
		k := KeyOf(name, id)
		if prev, ok := seen[k]; ok && prev != [2]string{name, id} {
			t.Fatalf("KeyOf(%q, %q) = KeyOf(%q, %q) = %q", name, id, prev[0], prev[1], k)
		}
		seen[k] = [2]string{name, id}
	}
	if got := KeyOf("summaries", "42"); got != "9:summaries:42" {
		t.Fatalf("KeyOf = %q", got)
	}
}

// TestNamedLock: a named lock's ids are separate keys, its options are the
// defaults of its holds, two names never share a key, and a named
// semaphore keeps its limit.
func TestNamedLock(t *testing.T) {
	clock := newTestClock()
	m := NewMemoryStoreClock(clock.Now)
	e := New(m)
	defer e.Close()
	ctx := t.Context()
	a := e.Lock("a:1", TTL(time.Minute))
	b := e.Lock("a", TTL(2*time.Minute))
	if a.Name() != "a:1" || a.Limit() != 1 || a.Key("x") != "3:a:1:x" {
		t.Fatalf("Name %q Limit %d Key %q", a.Name(), a.Limit(), a.Key("x"))
	}
	err := a.Hold(ctx, "x", func(ctx context.Context, l *Lease) error {
		if l.Key() != KeyOf("a:1", "x") {
			t.Errorf("lease key %q", l.Key())
		}
		info, err := a.Inspect(ctx, "x")
		if err != nil || len(info.Holders) != 1 || info.Holders[0].Left != time.Minute {
			t.Errorf("Inspect inside: %+v, %v; want one holder with the lock's TTL left", info, err)
		}
		// "a" with id "1:x" spells the same characters but is another key.
		ran, err := b.TryHold(ctx, "1:x", func(ctx context.Context, _ *Lease) error {
			info, err := b.Inspect(ctx, "1:x")
			if err != nil || info.Holders[0].Left != 2*time.Minute {
				t.Errorf("b's own TTL: %+v, %v", info, err)
			}
			return nil
		})
		if !ran || err != nil {
			t.Errorf("TryHold of another name's look-alike: %v, %v", ran, err)
		}
		if ran, err := a.TryHold(ctx, "x", func(context.Context, *Lease) error { return nil }); ran || err != nil {
			t.Errorf("TryHold of the held id: %v, %v", ran, err)
		}
		// A call's options override the lock's.
		return a.Hold(ctx, "y", func(ctx context.Context, _ *Lease) error {
			info, err := a.Inspect(ctx, "y")
			if err != nil || info.Holders[0].Left != 3*time.Minute {
				t.Errorf("per-call TTL: %+v, %v", info, err)
			}
			return nil
		}, TTL(3*time.Minute))
	})
	if err != nil {
		t.Fatal(err)
	}

	sl := e.Semaphore(2).Lock("render")
	if sl.Limit() != 2 {
		t.Fatalf("named semaphore limit %d", sl.Limit())
	}
	err = sl.Hold(ctx, "gen", func(ctx context.Context, _ *Lease) error {
		return sl.Hold(ctx, "gen", func(ctx context.Context, _ *Lease) error {
			if ran, err := sl.TryHold(ctx, "gen", func(context.Context, *Lease) error { return nil }); ran || err != nil {
				t.Errorf("third holder of a semaphore of 2: %v, %v", ran, err)
			}
			info, err := sl.Inspect(ctx, "gen")
			if err != nil || len(info.Holders) != 2 || info.Limit != 2 || info.Free {
				t.Errorf("Inspect: %+v, %v", info, err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Hold(ctx, strings.Repeat("x", MaxKeyLen), func(context.Context, *Lease) error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an id past the key length: %v", err)
	}
	for _, bad := range []func(){
		func() { e.Lock("") },
		func() { e.Lock("\xff") },
		func() { e.Lock("n", TTL(0)) },
		func() { e.Semaphore(1).Lock("n", Wait(-1)) },
	} {
		if err := panics(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("invalid Lock panicked with %v, want ErrInvalid", err)
		}
	}
	assertIdle(t, e, m)
}

// TestWaitZeroAgreesWithTryHold: in every situation, Hold with Wait(0)
// fails with ErrTimeout exactly when TryHold answers false, and both run
// fn otherwise.
func TestWaitZeroAgreesWithTryHold(t *testing.T) {
	type situation struct {
		name  string
		setup func(t *testing.T, e, other *Engine) (cleanup func())
		free  bool
	}
	situations := []situation{
		{"free", func(*testing.T, *Engine, *Engine) func() { return func() {} }, true},
		{"held here", func(t *testing.T, e, _ *Engine) func() {
			r := holdOpen(t, e, "k")
			return func() { _ = r() }
		}, false},
		{"held by another engine", func(t *testing.T, _, o *Engine) func() {
			r := holdOpen(t, o, "k")
			return func() { _ = r() }
		}, false},
		{"waiter queued here", func(t *testing.T, e, o *Engine) func() {
			r := holdOpen(t, o, "k")
			done := make(chan error, 1)
			go func() {
				done <- e.Hold(context.Background(), "k", func(context.Context, *Lease) error { return nil })
			}()
			waitFor(t, "a waiter", func() bool { return waiting(e, false, "k") == 1 })
			return func() { _ = r(); <-done }
		}, false},
	}
	for _, sit := range situations {
		t.Run(sit.name, func(t *testing.T) {
			m := NewMemoryStore()
			e, other := New(m, PollInterval(time.Millisecond, time.Millisecond)), New(m)
			defer other.Close()
			defer e.Close()
			cleanup := sit.setup(t, e, other)
			defer cleanup()
			ranHold := false
			err := e.Hold(t.Context(), "k", func(context.Context, *Lease) error { ranHold = true; return nil }, Wait(0))
			ran, terr := e.TryHold(t.Context(), "k", func(context.Context, *Lease) error { return nil })
			if terr != nil {
				t.Fatalf("TryHold: %v", terr)
			}
			if ran != sit.free || ranHold != sit.free || (err == nil) != sit.free {
				t.Fatalf("TryHold ran %v; Hold(Wait(0)) ran %v, %v; want both %v", ran, ranHold, err, sit.free)
			}
			var te *TimeoutError
			if !sit.free && (!errors.As(err, &te) || te.Wait != 0) {
				t.Fatalf("Hold(Wait(0)) on a taken key: %v, want a *TimeoutError with Wait 0", err)
			}
		})
	}
}

// TestLeaseExpires: a lease's local expiry is its TTL after the
// acquisition was sent, and moves on with renewals.
func TestLeaseExpires(t *testing.T) {
	e := New(NewMemoryStore(), TTL(2*time.Second))
	defer e.Close()
	err := e.Hold(t.Context(), "k", func(ctx context.Context, l *Lease) error {
		first := l.Expires()
		if left := time.Until(first); left <= 0 || left > 2*time.Second {
			return fmt.Errorf("Expires in %v, want within the TTL of 2s", left)
		}
		waitFor(t, "a renewal", func() bool { return l.Expires().After(first) })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
