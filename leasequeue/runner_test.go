package leasequeue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"studio/internal/testsignal"
	"studio/leasequeue"
	"studio/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// queue is a Handler over an in-memory queue of item names. run, when set,
// is what Run does; renew, when set, answers renewals.
type queue struct {
	mu      sync.Mutex
	pending []string
	claims  int
	ran     map[string]int

	running, maxRunning atomic.Int32

	run        func(ctx context.Context, item string)
	renew      func(items []string) (lost, canceled []string, err error)
	renewHangs bool // Renew blocks until its context ends
	// claimDelays are how long the claims that find items take, one at a
	// time, each claiming one item, while any are left.
	claimDelays []time.Duration
	// session is the runner's session the last Run was given.
	session atomic.Pointer[leasequeue.Session]
	// changed tells of each item run and each renewal.
	changed testsignal.Changes
}

func newQueue(n int) *queue {
	q := &queue{ran: map[string]int{}}
	for i := range n {
		q.pending = append(q.pending, fmt.Sprintf("item-%03d", i))
	}
	return q
}

func (q *queue) Claim(_ context.Context, owner string, limit int, ttl time.Duration) ([]string, error) {
	if owner == "" || limit < 1 || ttl <= 0 {
		return nil, fmt.Errorf("claim: owner %q, limit %d, ttl %v", owner, limit, ttl)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(limit, len(q.pending))
	var delay time.Duration
	if len(q.claimDelays) > 0 && n > 0 {
		n, delay, q.claimDelays = 1, q.claimDelays[0], q.claimDelays[1:]
	}
	out := append([]string(nil), q.pending[:n]...)
	q.pending = q.pending[n:]
	if n > 0 {
		q.claims++
	}
	q.mu.Unlock()
	time.Sleep(delay) // a slow claim: time passes on purpose, the lease's deadline counts from before it
	q.mu.Lock()
	return out, nil
}

func (q *queue) Lease(item string) store.Lease { return store.Lease{Kind: "test", ID: item} }

// RenewLeases is the queue's store: renew, when set, answers.
func (q *queue) RenewLeases(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	if q.renewHangs {
		<-ctx.Done() // a stuck connection: the call ends with its context
		return store.RenewResult{}, ctx.Err()
	}
	if q.renew != nil {
		items := make([]string, len(p.Leases))
		for i, l := range p.Leases {
			items[i] = l.ID
		}
		lost, canceled, err := q.renew(items)
		q.changed.Notify()
		return store.RenewResult{Lost: lost, Canceled: canceled}, err
	}
	return store.RenewResult{}, nil
}

func (q *queue) Run(ctx context.Context, s *leasequeue.Session, item string) {
	start := time.Now()
	defer func() { s.Observe(time.Since(start)) }()
	n := q.running.Add(1)
	defer q.running.Add(-1)
	for {
		m := q.maxRunning.Load()
		if n <= m || q.maxRunning.CompareAndSwap(m, n) {
			break
		}
	}
	q.session.Store(s)
	if q.run != nil {
		q.run(ctx, item)
	}
	q.mu.Lock()
	q.ran[item]++
	q.mu.Unlock()
	q.changed.Notify()
}

// await waits, in an item's goroutine, until cond holds (checked again at
// each item run and each renewal) or ctx ends.
func (q *queue) await(ctx context.Context, cond func() bool) {
	for {
		ch := q.changed.Next()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

func (q *queue) ranAll(n int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ran) == n
}

func newRunner(t *testing.T, cfg leasequeue.Config, q *queue) *leasequeue.Runner[string] {
	t.Helper()
	if cfg.Owner == "" {
		cfg.Owner = "test"
	}
	if cfg.Leases == nil {
		cfg.Leases = q
	}
	r, err := leasequeue.New(cfg, q)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRunsEveryItemOnce: without ClaimAhead the runner holds no more items
// than Concurrency, and runs each claimed item once.
func TestRunsEveryItemOnce(t *testing.T) {
	t.Parallel()
	q := newQueue(200)
	// Items that take a moment (time passes on purpose), so that they
	// overlap and the bound is tested.
	q.run = func(ctx context.Context, _ string) { time.Sleep(100 * time.Microsecond) }
	r := newRunner(t, leasequeue.Config{Options: leasequeue.Options{Concurrency: 3}}, q)
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.changed.Until(t, "every item run", func() bool { return q.ranAll(200) })
	r.Stop(context.Background())
	for item, n := range q.ran {
		if n != 1 {
			t.Fatalf("%s ran %d times", item, n)
		}
	}
	if m := q.maxRunning.Load(); m > 3 || m < 1 {
		t.Fatalf("at most %d items ran at once, want 1..3", m)
	}
}

// TestClaimAheadClaimsInBatches: with ClaimAhead and quick items the
// runner claims far more than Concurrency at once.
func TestClaimAheadClaimsInBatches(t *testing.T) {
	t.Parallel()
	q := newQueue(2000)
	r := newRunner(t, leasequeue.Config{Options: leasequeue.Options{Concurrency: 2}, ClaimAhead: true}, q)
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.changed.Until(t, "every item run", func() bool { return q.ranAll(2000) })
	r.Stop(context.Background())
	q.mu.Lock()
	claims := q.claims
	q.mu.Unlock()
	// Without claiming ahead, 2000 items take at least 1000 claims of 2;
	// holding twice Concurrency, 500.
	if claims >= 500 {
		t.Fatalf("%d claims for 2000 items: not claiming ahead", claims)
	}
}

// TestRenewalEndsItems: a renewal that answers "lost" ends the item's
// context with store.ErrLeaseLost, "canceled" with ErrCanceled, and a lease
// no renewal confirms before its deadline is lost too.
func TestRenewalEndsItems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		renew func(items []string) ([]string, []string, error)
		want  error
	}{
		{"lost", func(items []string) ([]string, []string, error) { return items, nil, nil }, store.ErrLeaseLost},
		{"canceled", func(items []string) ([]string, []string, error) { return nil, items, nil }, leasequeue.ErrCanceled},
		{"unconfirmed", func([]string) ([]string, []string, error) { return nil, nil, errors.New("the database is away") }, store.ErrLeaseLost},
		{"hung", nil, store.ErrLeaseLost}, // renewals that never answer
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := newQueue(1)
			q.renew = tc.renew
			q.renewHangs = tc.renew == nil
			causes := make(chan error, 1)
			q.run = func(ctx context.Context, _ string) {
				<-ctx.Done()
				causes <- context.Cause(ctx)
			}
			r := newRunner(t, leasequeue.Config{Options: leasequeue.Options{Concurrency: 1, LeaseTTL: 30 * time.Millisecond}}, q)
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer r.Stop(context.Background())
			select {
			case got := <-causes:
				if !errors.Is(got, tc.want) {
					t.Fatalf("cause %v, want %v", got, tc.want)
				}
			case <-time.After(testsignal.Patience(t)):
				t.Fatal("the item was never ended")
			}
		})
	}
}

// TestStopGrace: Stop lets a running item end within Grace, ends the
// context of one that does not with ErrStopping, and returns only after
// every item and loop has ended; the loops outlive the items.
func TestStopGrace(t *testing.T) {
	t.Parallel()
	q := newQueue(2)
	var itemsEnded atomic.Int32
	loopSawItemsEnded := make(chan int32, 1)
	ends := map[string]chan error{"item-000": make(chan error, 1), "item-001": make(chan error, 1)}
	started := make(chan struct{}, 2)
	q.run = func(ctx context.Context, item string) {
		defer itemsEnded.Add(1)
		started <- struct{}{}
		if item == "item-000" {
			// ends by itself, after the stop began
			<-q.session.Load().StopContext().Done()
			ends[item] <- nil
			return
		}
		<-ctx.Done()
		ends[item] <- context.Cause(ctx)
	}
	r := newRunner(t, leasequeue.Config{
		Options: leasequeue.Options{
			Concurrency: 2,
			Grace:       100 * time.Millisecond,
		},
		Loops: []func(context.Context){func(ctx context.Context) { <-ctx.Done(); loopSawItemsEnded <- itemsEnded.Load() }},
	}, q)
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-started
	<-started
	r.Stop(context.Background())
	got := []error{<-ends["item-000"], <-ends["item-001"]} // in either order of ending
	if got[0] != nil || !errors.Is(got[1], leasequeue.ErrStopping) {
		t.Fatalf("causes %v, want the quick item to end by itself and the other with ErrStopping", got)
	}
	if n := <-loopSawItemsEnded; n != 2 {
		t.Fatalf("the loop ended when %d items had ended, want 2", n)
	}
}

// TestStartStopInAnyOrder: Start and Stop from many goroutines at once,
// twice, in any order; a stopped runner starts again and runs new items.
func TestStartStopInAnyOrder(t *testing.T) {
	t.Parallel()
	q := newQueue(0)
	r := newRunner(t, leasequeue.Config{Options: leasequeue.Options{Concurrency: 2, PollMax: 5 * time.Millisecond}}, q)
	r.Stop(context.Background()) // stopping a runner never started
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if i%2 == 0 {
				if err := r.Start(context.Background()); err != nil {
					t.Error(err)
				}
			} else {
				r.Stop(context.Background())
			}
		})
	}
	wg.Wait()
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	q.pending = append(q.pending, "late")
	q.mu.Unlock()
	q.changed.Until(t, "the late item run", func() bool { return q.ranAll(1) })
	r.Stop(context.Background())
	r.Stop(context.Background())
}

// TestSlowClaimIsRenewedFirst: an item whose claim took longer than the
// lease (its deadline counts from before the claim), and that starts while
// a renewal of the other items runs, is renewed before its deadline is held
// against it: a renewal that confirms it keeps it.
func TestSlowClaimIsRenewedFirst(t *testing.T) {
	t.Parallel()
	q := newQueue(2)
	// The claim takes two TTLs; renewals take a third of one, with two
	// thirds to spare for a loaded machine.
	q.claimDelays = []time.Duration{0, 1800 * time.Millisecond}
	var renewed atomic.Int32
	q.renew = func([]string) ([]string, []string, error) {
		time.Sleep(300 * time.Millisecond) // a slow renewal, on purpose: renewals run back to back
		renewed.Add(1)
		return nil, nil, nil
	}
	causes := make(chan error, 2)
	q.run = func(ctx context.Context, item string) {
		if item == "item-000" { // held while the slow claim runs
			q.await(ctx, func() bool { return !q.ranAll(0) })
			return
		}
		start := renewed.Load()
		q.await(ctx, func() bool { return renewed.Load() >= start+3 })
		causes <- context.Cause(ctx)
	}
	r := newRunner(t, leasequeue.Config{Options: leasequeue.Options{Concurrency: 2, LeaseTTL: 900 * time.Millisecond}}, q)
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())
	if cause := <-causes; cause != nil {
		t.Fatalf("the slowly claimed item ended with %v before three renewals", cause)
	}
}
