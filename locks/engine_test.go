package locks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a stopped clock for the memory store.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// hookStore wraps a store, counting calls and letting a test replace any.
type hookStore struct {
	Store
	acquire func(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error)
	renew   func(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	release func(ctx context.Context, key, owner string) (bool, error)

	acquires, renews, releases atomic.Int64
	renewing, maxRenewing      atomic.Int64 // renewals in flight, and their most
}

func (h *hookStore) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	h.acquires.Add(1)
	if h.acquire != nil {
		return h.acquire(ctx, key, owner, ttl)
	}
	return h.Store.Acquire(ctx, key, owner, ttl)
}

func (h *hookStore) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	h.renews.Add(1)
	n := h.renewing.Add(1)
	defer h.renewing.Add(-1)
	for {
		m := h.maxRenewing.Load()
		if n <= m || h.maxRenewing.CompareAndSwap(m, n) {
			break
		}
	}
	if h.renew != nil {
		return h.renew(ctx, key, owner, ttl)
	}
	return h.Store.Renew(ctx, key, owner, ttl)
}

func (h *hookStore) Release(ctx context.Context, key, owner string) (bool, error) {
	h.releases.Add(1)
	if h.release != nil {
		return h.release(ctx, key, owner)
	}
	return h.Store.Release(ctx, key, owner)
}

// assertIdle fails unless the engine keeps no queue and the store no lease.
func assertIdle(t *testing.T, e *Engine, m *MemoryStore) {
	t.Helper()
	e.mu.Lock()
	queues := 0
	for _, qs := range e.queues {
		for _, q := range qs {
			if !q.idle() {
				queues++
			}
		}
	}
	running, renewals := e.active != nil, len(e.renewals)
	e.mu.Unlock()
	if queues != 0 || running || renewals != 0 {
		t.Fatalf("engine keeps %d busy queues, leases %v, %d renewals; want none", queues, running, renewals)
	}
	if l, s := m.len(); l != 0 || s != 0 {
		t.Fatalf("store keeps %d locks and %d semaphores, want none", l, s)
	}
}

// waiting returns how many waiters the engine has queued on a lock key.
func waiting(e *Engine, slot bool, key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if q := e.queues[space(slot)][key]; q != nil {
		return q.waiters.Len()
	}
	return 0
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// holdOpen holds key in the background until the returned func is called;
// it returns once fn runs.
func holdOpen(t *testing.T, e *Engine, key string, opts ...Option) (release func() error) {
	t.Helper()
	running, stop := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Hold(context.Background(), key, func(ctx context.Context, l *Lease) error {
			close(running)
			<-stop
			return nil
		}, opts...)
	}()
	select {
	case <-running:
	case err := <-done:
		t.Fatalf("background Hold(%q) returned before running: %v", key, err)
	}
	return func() error { close(stop); return <-done }
}

func TestHoldRunsAndReleases(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	var fnCtx context.Context
	var fences []int64
	for range 3 {
		err := e.Hold(t.Context(), "report", func(ctx context.Context, l *Lease) error {
			fnCtx = ctx
			if l.Key() != "report" {
				t.Errorf("Key() = %q", l.Key())
			}
			fences = append(fences, l.Fence())
			if ran, err := e.TryHold(ctx, "report", func(context.Context, *Lease) error { return nil }); ran || err != nil {
				t.Errorf("TryHold of a held key = %v, %v; want false, nil", ran, err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
	}
	if !(fences[0] < fences[1] && fences[1] < fences[2]) {
		t.Fatalf("fences %v do not grow", fences)
	}
	if !errors.Is(context.Cause(fnCtx), errReleased) {
		t.Fatalf("fn's context after Hold: cause %v, want errReleased", context.Cause(fnCtx))
	}
	assertIdle(t, e, m)
}

// TestCallerEndsHold: fn's context ends when the caller's does, with the
// caller's cause; the release still reaches the store, on a context that
// carries the caller's values but not its cancel.
func TestCallerEndsHold(t *testing.T) {
	m := NewMemoryStore()
	type valueKey struct{}
	var relErr error
	var relValue any
	h := &hookStore{Store: m}
	h.release = func(ctx context.Context, key, owner string) (bool, error) {
		relErr, relValue = ctx.Err(), ctx.Value(valueKey{})
		return m.Release(ctx, key, owner)
	}
	e := New(h)
	defer e.Close()
	parent, cancel := context.WithCancelCause(context.WithValue(t.Context(), valueKey{}, "v"))
	gone := errors.New("caller gone")
	var cause error
	err := e.Hold(parent, "k", func(ctx context.Context, _ *Lease) error {
		cancel(gone)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || cause != gone {
		t.Fatalf("Hold = %v, fn's context cause %v; want context.Canceled and the caller's cause", err, cause)
	}
	if h.releases.Load() != 1 || relErr != nil || relValue != "v" {
		t.Fatalf("%d releases, on a context ended by %v with value %v; want 1, live, with the caller's value", h.releases.Load(), relErr, relValue)
	}
	assertIdle(t, e, m)
}

func TestFIFOOrder(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	stop := holdOpen(t, e, "k")
	const n = 12
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := e.Hold(context.Background(), "k", func(context.Context, *Lease) error {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
		})
		// Waiter i is queued before waiter i+1 starts.
		waitFor(t, fmt.Sprintf("waiter %d queued", i), func() bool { return waiting(e, false, "k") == i+1 })
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("waiters ran in order %v, want 0..%d", order, n-1)
		}
	}
	assertIdle(t, e, m)
}

func TestSemaphoreFIFOOrder(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	sem := e.Semaphore(2)
	block := make(chan struct{})
	var holders sync.WaitGroup
	for range 2 {
		running := make(chan struct{})
		holders.Go(func() {
			_ = sem.Hold(context.Background(), "gen", func(context.Context, *Lease) error {
				close(running)
				<-block
				return nil
			})
		})
		<-running
	}
	const n = 10
	fences := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			err := sem.Hold(context.Background(), "gen", func(_ context.Context, l *Lease) error {
				fences[i] = l.Fence()
				return nil
			})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
		})
		waitFor(t, fmt.Sprintf("waiter %d queued", i), func() bool { return waiting(e, true, "gen") == i+1 })
	}
	close(block)
	holders.Wait()
	wg.Wait()
	// Fences are drawn at each grant, so they give the order of grants.
	for i := 1; i < n; i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("semaphore waiters granted out of order: fences %v", fences)
		}
	}
	assertIdle(t, e, m)
}

func TestCancelWhileWaitingLeavesNothing(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	stop := holdOpen(t, e, "k")

	// Two waiters; the first (at the front) is canceled, the second must
	// still get the key when the holder leaves.
	ctx, cancel := context.WithCancelCause(context.Background())
	errA := make(chan error, 1)
	go func() {
		errA <- e.Hold(ctx, "k", func(context.Context, *Lease) error {
			t.Error("canceled waiter ran")
			return nil
		})
	}()
	waitFor(t, "A queued", func() bool { return waiting(e, false, "k") == 1 })
	errB := make(chan error, 1)
	go func() {
		errB <- e.Hold(context.Background(), "k", func(context.Context, *Lease) error { return nil })
	}()
	waitFor(t, "B queued", func() bool { return waiting(e, false, "k") == 2 })

	stopped := errors.New("caller gave up")
	cancel(stopped)
	if err := <-errA; !errors.Is(err, stopped) {
		t.Fatalf("canceled waiter: %v, want its context's cause", err)
	}
	if n := waiting(e, false, "k"); n != 1 {
		t.Fatalf("%d waiters after the cancel, want 1", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-errB; err != nil {
		t.Fatalf("second waiter: %v", err)
	}
	assertIdle(t, e, m)

	// A canceled context before the call: nothing happens at all.
	if err := e.Hold(ctx, "k", func(context.Context, *Lease) error { return nil }); !errors.Is(err, stopped) {
		t.Fatalf("Hold with a canceled context: %v", err)
	}
	assertIdle(t, e, m)
}

// TestGrantCancelRace cancels waiters at the moment the key is handed to
// them: each either runs fn and returns nil, or returns the cancel and
// leaves nothing held.
func TestGrantCancelRace(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	var ran, canceled int
	for i := range 300 {
		stop := holdOpen(t, e, "k")
		ctx, cancel := context.WithCancel(context.Background())
		var fnRuns atomic.Int64
		done := make(chan error, 1)
		go func() {
			done <- e.Hold(ctx, "k", func(context.Context, *Lease) error {
				fnRuns.Add(1)
				return nil
			})
		}()
		waitFor(t, "waiter queued", func() bool { return waiting(e, false, "k") == 1 })
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; cancel() })
		wg.Go(func() {
			<-start
			if err := stop(); err != nil {
				t.Error(err)
			}
		})
		close(start)
		wg.Wait()
		err := <-done
		switch {
		case err == nil && fnRuns.Load() == 1:
			ran++
		case errors.Is(err, context.Canceled) && fnRuns.Load() == 0:
			canceled++
		default:
			t.Fatalf("iteration %d: Hold = %v with fn run %d times", i, err, fnRuns.Load())
		}
		assertIdle(t, e, m)
	}
	t.Logf("granted %d, canceled %d", ran, canceled)
}

// TestGrantAfterCancelIsGivenBack makes the race certain: the caller gives
// up while the store is granting.
func TestGrantAfterCancelIsGivenBack(t *testing.T) {
	m := NewMemoryStore()
	inAcquire, proceed := make(chan struct{}), make(chan struct{})
	var owner string
	h := &hookStore{Store: m}
	h.acquire = func(ctx context.Context, key, o string, ttl time.Duration) (int64, bool, error) {
		owner = o
		close(inAcquire)
		<-proceed
		return m.Acquire(ctx, key, o, ttl)
	}
	h.release = func(ctx context.Context, key, o string) (bool, error) {
		if o != owner {
			t.Errorf("released owner %q, want the granted %q", o, owner)
		}
		return m.Release(ctx, key, o)
	}
	e := New(h)
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.Hold(ctx, "k", func(context.Context, *Lease) error {
			t.Error("fn ran after its caller gave up")
			return nil
		})
	}()
	<-inAcquire
	cancel()
	close(proceed)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Hold = %v, want context.Canceled", err)
	}
	if h.releases.Load() != 1 {
		t.Fatalf("%d releases, want 1", h.releases.Load())
	}
	assertIdle(t, e, m)
}

func TestLostLeaseCancelsFnOnce(t *testing.T) {
	m := NewMemoryStore()
	// Every renewal is refused, as the store refuses a lease that ran
	// out: the first one, at TTL/3, loses the lease. The TTL leaves a
	// loaded machine room: the engine would expire the lease on its own
	// (no renewal at all) only if the first one came a whole TTL late.
	h := &hookStore{Store: m}
	h.renew = func(context.Context, string, string, time.Duration) (bool, error) { return false, nil }
	e := New(h, TTL(time.Second))
	defer e.Close()
	var cause error
	var fence int64
	var cancels atomic.Int64
	var renewsAtLoss int64
	err := e.Hold(t.Context(), "k", func(ctx context.Context, l *Lease) error {
		fence = l.Fence()
		context.AfterFunc(ctx, func() { cancels.Add(1) })
		<-ctx.Done()
		cause = context.Cause(ctx)
		renewsAtLoss = h.renews.Load()
		// Three renewal periods, during which none may come: an absence
		// has no event to wait for, so time passing is the test.
		time.Sleep(time.Second)
		return ctx.Err()
	})
	var lost *LeaseLostError
	if !errors.As(err, &lost) || !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Hold = %v, want a *LeaseLostError", err)
	}
	if lost.Key != "k" || lost.Fence != fence || lost.Err != nil {
		t.Fatalf("LeaseLostError = %+v, want key k, fence %d, no renewal error", lost, fence)
	}
	if !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("fn's context cause = %v, want ErrLeaseLost", cause)
	}
	if cancels.Load() != 1 {
		t.Fatalf("fn's context ended %d times", cancels.Load())
	}
	if renewsAtLoss != 1 || h.renews.Load() != 1 {
		t.Fatalf("renewals: %d at the loss, %d in all; want exactly the one refused", renewsAtLoss, h.renews.Load())
	}
	if h.releases.Load() != 1 {
		t.Fatalf("%d releases, want 1", h.releases.Load())
	}
	assertIdle(t, e, m)
}

func TestLostLeaseWhenRenewalsFail(t *testing.T) {
	m := NewMemoryStore()
	broken := errors.New("store unreachable")
	h := &hookStore{Store: m}
	h.renew = func(context.Context, string, string, time.Duration) (bool, error) { return false, broken }
	e := New(h, TTL(150*time.Millisecond))
	defer e.Close()
	var cause error
	err := e.Hold(t.Context(), "k", func(ctx context.Context, l *Lease) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return errors.New("fn's own failure")
	})
	var lost *LeaseLostError
	if !errors.As(err, &lost) || !errors.Is(lost.Err, broken) {
		t.Fatalf("Hold = %v, want a *LeaseLostError wrapping the renewal error", err)
	}
	if !strings.Contains(err.Error(), "fn's own failure") {
		t.Fatalf("Hold = %v, lost fn's own error", err)
	}
	if !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("cause = %v", cause)
	}
	if h.renews.Load() < 2 {
		t.Fatalf("%d renewal attempts, want retries before giving up", h.renews.Load())
	}
	assertIdle(t, e, m)
}

func TestRenewalKeepsLeaseOneAtATime(t *testing.T) {
	m := NewMemoryStore()
	h := &hookStore{Store: m}
	h.renew = func(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
		// A slow store: the renewal takes longer than the 300 ms period.
		time.Sleep(330 * time.Millisecond)
		return m.Renew(ctx, key, owner, ttl)
	}
	// Renewals slower than their period, with 570 ms of the TTL to
	// spare for a loaded machine.
	e := New(h, TTL(900*time.Millisecond))
	defer e.Close()
	err := e.Hold(t.Context(), "k", func(ctx context.Context, l *Lease) error {
		waitFor(t, "a fourth renewal", func() bool { return h.renews.Load() >= 4 || ctx.Err() != nil })
		return ctx.Err()
	})
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	if n := h.maxRenewing.Load(); n != 1 {
		t.Fatalf("%d renewals in flight at once, want 1", n)
	}
	after := h.renews.Load()
	// Over two renewal periods, during which none may come: an absence
	// has no event to wait for, so time passing is the test.
	time.Sleep(700 * time.Millisecond)
	if h.renews.Load() != after {
		t.Fatal("renewals went on after Hold returned")
	}
	assertIdle(t, e, m)
}

func TestPanicReleasesAndGoesOn(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	type boom struct{ msg string }
	thrown := &boom{"boom"}
	waiterDone := make(chan error, 1)
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = e.Hold(t.Context(), "k", func(ctx context.Context, l *Lease) error {
			go func() {
				waiterDone <- e.Hold(context.Background(), "k", func(context.Context, *Lease) error { return nil })
			}()
			waitFor(t, "waiter queued", func() bool { return waiting(e, false, "k") == 1 })
			panic(thrown)
		})
	}()
	if recovered != thrown {
		t.Fatalf("recovered %v, want fn's own panic value", recovered)
	}
	if err := <-waiterDone; err != nil {
		t.Fatalf("waiter behind the panic: %v", err)
	}
	assertIdle(t, e, m)
}

func TestCloseAnswersEveryone(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	sem := e.Semaphore(1)
	running := make(chan struct{})
	var holderCause error
	var holderReturned, semReturned atomic.Bool
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- e.Hold(context.Background(), "k", func(ctx context.Context, l *Lease) error {
			close(running)
			<-ctx.Done()
			holderCause = context.Cause(ctx)
			holderReturned.Store(true)
			return ctx.Err()
		})
	}()
	<-running
	semRunning := make(chan struct{})
	semDone := make(chan error, 1)
	go func() {
		semDone <- sem.Hold(context.Background(), "k", func(ctx context.Context, l *Lease) error {
			close(semRunning)
			<-ctx.Done()
			semReturned.Store(true)
			return nil // finished its work anyway
		})
	}()
	<-semRunning
	const n = 5
	waiters := make(chan error, 2*n)
	for i := range n {
		go func() {
			waiters <- e.Hold(context.Background(), "k", func(context.Context, *Lease) error { return nil })
		}()
		go func() {
			waiters <- sem.Hold(context.Background(), "k", func(context.Context, *Lease) error { return nil })
		}()
		waitFor(t, "waiters queued", func() bool { return waiting(e, false, "k") == i+1 && waiting(e, true, "k") == i+1 })
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close returned: every fn has returned and every lease is released.
	if !holderReturned.Load() || !semReturned.Load() {
		t.Fatal("Close returned before the holders' fn did")
	}
	assertIdle(t, e, m)
	for range 2 * n {
		select {
		case err := <-waiters:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("waiter: %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was never answered")
		}
	}
	if err := <-holderDone; !errors.Is(err, ErrClosed) {
		t.Fatalf("holder: %v, want ErrClosed", err)
	}
	if err := <-semDone; err != nil {
		t.Fatalf("semaphore holder that finished its work: %v, want nil", err)
	}
	if !errors.Is(holderCause, ErrClosed) {
		t.Fatalf("holder's context cause: %v", holderCause)
	}
	if err := e.Hold(t.Context(), "k", func(context.Context, *Lease) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Hold after Close: %v", err)
	}
	if ran, err := sem.TryHold(t.Context(), "k", func(context.Context, *Lease) error { return nil }); ran || !errors.Is(err, ErrClosed) {
		t.Fatalf("TryHold after Close: %v, %v", ran, err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	assertIdle(t, e, m)
}

func TestWaitTimesOut(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	stop := holdOpen(t, e, "k")
	for _, wait := range []time.Duration{0, 20 * time.Millisecond} {
		err := e.Hold(t.Context(), "k", func(context.Context, *Lease) error {
			t.Error("fn ran on a held key")
			return nil
		}, Wait(wait))
		var te *TimeoutError
		if !errors.Is(err, ErrTimeout) || !errors.As(err, &te) || te.Key != "k" || te.Wait != wait {
			t.Fatalf("Wait(%v): %v, want a *TimeoutError for k", wait, err)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	assertIdle(t, e, m)
}

func TestMaxHoldEndsFn(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	var cause error
	err := e.Hold(t.Context(), "k", func(ctx context.Context, l *Lease) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	}, MaxHold(10*time.Millisecond))
	if !errors.Is(err, ErrMaxHold) || !errors.Is(cause, ErrMaxHold) {
		t.Fatalf("Hold = %v, cause %v; want ErrMaxHold", err, cause)
	}
	assertIdle(t, e, m)
}

func TestTryHold(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	noop := func(context.Context, *Lease) error { return nil }
	if ran, err := e.TryHold(t.Context(), "k", noop); !ran || err != nil {
		t.Fatalf("TryHold of a free key = %v, %v", ran, err)
	}
	fnErr := errors.New("fn failed")
	if ran, err := e.TryHold(t.Context(), "k", func(context.Context, *Lease) error { return fnErr }); !ran || !errors.Is(err, fnErr) {
		t.Fatalf("TryHold = %v, %v; want fn's error", ran, err)
	}
	stop := holdOpen(t, e, "k")
	if ran, err := e.TryHold(t.Context(), "k", noop); ran || err != nil {
		t.Fatalf("TryHold of a held key = %v, %v", ran, err)
	}
	// A queued waiter keeps the key from TryHold even in the instant the
	// key is free: no barging past the line.
	waited := make(chan error, 1)
	go func() { waited <- e.Hold(context.Background(), "k", noop) }()
	waitFor(t, "waiter queued", func() bool { return waiting(e, false, "k") == 1 })
	if ran, err := e.TryHold(t.Context(), "k", noop); ran || err != nil {
		t.Fatalf("TryHold with a waiter queued = %v, %v", ran, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	assertIdle(t, e, m)
}

func TestReleaseErrorNeverHidesFnError(t *testing.T) {
	m := NewMemoryStore()
	relErr := errors.New("release refused")
	h := &hookStore{Store: m}
	h.release = func(ctx context.Context, key, owner string) (bool, error) {
		_, _ = m.Release(ctx, key, owner)
		return false, relErr
	}
	e := New(h)
	defer e.Close()
	fnErr := errors.New("fn failed")
	err := e.Hold(t.Context(), "k", func(context.Context, *Lease) error { return fnErr })
	if !errors.Is(err, fnErr) || !errors.Is(err, ErrRelease) || !errors.Is(err, relErr) {
		t.Fatalf("Hold = %v, want fn's error joined with the release error", err)
	}
	err = e.Hold(t.Context(), "k", func(context.Context, *Lease) error { return nil })
	if !errors.Is(err, ErrRelease) || !errors.Is(err, relErr) {
		t.Fatalf("Hold = %v, want the release error", err)
	}
	assertIdle(t, e, m)
}

func TestStoreErrorOnAcquire(t *testing.T) {
	m := NewMemoryStore()
	broken := errors.New("disk full")
	h := &hookStore{Store: m}
	var tried string
	h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
		tried = owner
		_, _, _ = m.Acquire(ctx, key, owner, ttl) // taken, but the answer is lost
		return 0, false, broken
	}
	h.release = func(ctx context.Context, key, owner string) (bool, error) {
		if owner != tried {
			t.Errorf("released %q, want the owner whose acquire failed %q", owner, tried)
		}
		return m.Release(ctx, key, owner)
	}
	e := New(h)
	defer e.Close()
	err := e.Hold(t.Context(), "k", func(context.Context, *Lease) error {
		t.Error("fn ran")
		return nil
	})
	if !errors.Is(err, broken) {
		t.Fatalf("Hold = %v, want the store's error", err)
	}
	assertIdle(t, e, m)
}

func TestSemaphoreNeverOverLimit(t *testing.T) {
	m := NewMemoryStore()
	// Two engines on one store are two processes: their waiters meet only
	// in the store, by polling.
	e1, e2 := New(m, PollInterval(100*time.Microsecond, time.Millisecond)), New(m, PollInterval(100*time.Microsecond, time.Millisecond))
	defer e1.Close()
	defer e2.Close()
	const limit = 3
	var cur, most atomic.Int64
	var wg sync.WaitGroup
	for i := range 24 {
		sem := e1.Semaphore(limit)
		if i%2 == 1 {
			sem = e2.Semaphore(limit)
		}
		wg.Go(func() {
			for range 5 {
				err := sem.Hold(context.Background(), "gen", func(context.Context, *Lease) error {
					n := cur.Add(1)
					for {
						m := most.Load()
						if n <= m || most.CompareAndSwap(m, n) {
							break
						}
					}
					time.Sleep(200 * time.Microsecond) // work, so that holders overlap if they can
					cur.Add(-1)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if n := most.Load(); n != limit {
		t.Fatalf("at most %d holders at once, want exactly %d", n, limit)
	}
	assertIdle(t, e1, m)
	assertIdle(t, e2, m)
}

func TestTwoEnginesExclude(t *testing.T) {
	m := NewMemoryStore()
	engines := []*Engine{New(m, PollInterval(100*time.Microsecond, time.Millisecond)), New(m, PollInterval(100*time.Microsecond, time.Millisecond))}
	defer engines[0].Close()
	defer engines[1].Close()
	var (
		inside atomic.Int64
		last   int64 // written only while holding
		wg     sync.WaitGroup
	)
	for i := range 8 {
		e := engines[i%2]
		wg.Go(func() {
			for range 20 {
				err := e.Hold(context.Background(), "k", func(_ context.Context, l *Lease) error {
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d holders at once", n)
					}
					if l.Fence() <= last {
						t.Errorf("fence %d after %d", l.Fence(), last)
					}
					last = l.Fence()
					inside.Add(-1)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	assertIdle(t, engines[0], m)
}

func TestInvalidArguments(t *testing.T) {
	m := NewMemoryStore()
	e := New(m)
	defer e.Close()
	noop := func(context.Context, *Lease) error { return nil }
	cases := []struct {
		name string
		call func() error
	}{
		{"empty key", func() error { return e.Hold(t.Context(), "", noop) }},
		{"invalid UTF-8", func() error { return e.Hold(t.Context(), "a\xffb", noop) }},
		{"501 characters", func() error { return e.Hold(t.Context(), strings.Repeat("é", MaxKeyLen+1), noop) }},
		{"TTL below 1 ms", func() error { return e.Hold(t.Context(), "k", noop, TTL(time.Millisecond-1)) }},
		{"TTL above 30 days", func() error { return e.Hold(t.Context(), "k", noop, TTL(MaxTTL+time.Millisecond)) }},
		{"negative Wait", func() error { return e.Hold(t.Context(), "k", noop, Wait(-1)) }},
		{"zero MaxHold", func() error { return e.Hold(t.Context(), "k", noop, MaxHold(0)) }},
		{"bad PollInterval", func() error { return e.Hold(t.Context(), "k", noop, PollInterval(10, 5)) }},
		{"nil fn", func() error { return e.Hold(t.Context(), "k", nil) }},
		{"engine default", func() error { return New(m, TTL(0)).Hold(t.Context(), "k", noop) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
	valid := []struct {
		name string
		key  string
		opts []Option
	}{
		{"500 characters", strings.Repeat("é", MaxKeyLen), nil},
		{"NUL inside", "a\x00b", nil},
		{"TTL 1 ms", "k", []Option{TTL(MinTTL)}},
		{"TTL 30 days", "k", []Option{TTL(MaxTTL)}},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			err := e.Hold(t.Context(), tc.key, noop, tc.opts...)
			// A 1 ms lease may run out while a loaded machine schedules
			// the no-op fn: that is the lease working, not the option
			// being refused.
			if err != nil && !(tc.name == "TTL 1 ms" && errors.Is(err, ErrLeaseLost)) {
				t.Fatalf("Hold: %v", err)
			}
		})
	}
	assertIdle(t, e, m)
}
