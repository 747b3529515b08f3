package lockservice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"studio/internal/testsignal"
	"studio/locks"
	"studio/lockservice"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newService is a service over a memory engine whose store clock runs
// offset ahead of the real one.
func newService(t *testing.T, cfg lockservice.Config, offset *atomic.Int64) *lockservice.Service {
	t.Helper()
	svc, _ := newServiceEngine(t, cfg, offset)
	return svc
}

func newServiceEngine(t *testing.T, cfg lockservice.Config, offset *atomic.Int64) (*lockservice.Service, *locks.Engine) {
	t.Helper()
	store := locks.NewMemoryStoreClock(func() time.Time {
		if offset == nil {
			return time.Now()
		}
		return time.Now().Add(time.Duration(offset.Load()))
	})
	eng := locks.New(store)
	t.Cleanup(func() { eng.Close() })
	cfg.Engine = eng
	svc, err := lockservice.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc, eng
}

func req(key string, ttl, wait time.Duration) lockservice.Request {
	return lockservice.Request{Name: "jobs", Key: key, TTL: ttl, Wait: wait}
}

// ends counts the leases that ended, by state, and tells of each end
// (Config.Observe).
type ends struct {
	mu      sync.Mutex
	n       map[string]int
	changed testsignal.Changes
}

func (e *ends) observe(ev lockservice.Event) {
	if ev.Ended == "" {
		return
	}
	e.mu.Lock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[ev.Ended]++
	e.mu.Unlock()
	e.changed.Notify()
}

func (e *ends) count(state string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[state]
}

// pollFor polls cond: for a state no event tells of (an acquire that
// began waiting).
func pollFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testsignal.Patience(t))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRacingHolders: 32 goroutines, each with its own request id, take one
// key in turn: never two inside at once, the count exact, fences growing in
// the order of the holds.
func TestRacingHolders(t *testing.T) {
	t.Parallel()
	svc := newService(t, lockservice.Config{}, nil)
	ctx := context.Background()
	var (
		mu      sync.Mutex
		inside  atomic.Int32
		count   int
		fences  []int64
		wg      sync.WaitGroup
		failure atomic.Value
	)
	for g := range 32 {
		wg.Go(func() {
			for i := range 5 {
				l, _, err := svc.Acquire(ctx, "alice", fmt.Sprintf("g%d-%d", g, i), req("counter", 5*time.Second, 30*time.Second))
				if err != nil {
					failure.Store(err)
					return
				}
				if inside.Add(1) != 1 {
					failure.Store(errors.New("two holders inside at once"))
				}
				mu.Lock()
				n := count
				mu.Unlock()
				time.Sleep(50 * time.Microsecond) // work inside the lock, on purpose: a lost update would show
				mu.Lock()
				count = n + 1
				fences = append(fences, l.Fence)
				mu.Unlock()
				inside.Add(-1)
				if _, err := svc.Release(ctx, "alice", l.ID); err != nil {
					failure.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failure.Load().(error); err != nil {
		t.Fatal(err)
	}
	if count != 160 {
		t.Fatalf("count %d, want 160", count)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d after %d", fences[i], fences[i-1])
		}
	}
}

// TestStoreLossIsLost: when the store's lease ends under the engine (here
// the store's clock jumps past the TTL), the lease is lost and its next
// renewal says so.
func TestStoreLossIsLost(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	var ended ends
	svc := newService(t, lockservice.Config{Observe: ended.observe}, &offset)
	ctx := context.Background()
	l, _, err := svc.Acquire(ctx, "alice", "r1", req("k", 3*time.Second, 0))
	if err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(time.Hour)) // the store's lease is over
	ended.changed.Until(t, "the lease to end", func() bool { return svc.Held() == 0 })
	_, err = svc.Renew(ctx, "alice", l.ID)
	var ee *lockservice.EndedError
	if !errors.As(err, &ee) || ee.State != lockservice.StateLost {
		t.Fatalf("renew after the store lost it: %v, want ended lost", err)
	}
	if ended.count(lockservice.StateLost) == 0 {
		t.Error("no lost event observed")
	}
	// A new holder gets it at once, with a larger fence.
	l2, _, err := svc.Acquire(ctx, "alice", "r2", req("k", 3*time.Second, 0))
	if err != nil || l2.Fence <= l.Fence {
		t.Fatalf("next acquire: %+v %v (first fence %d)", l2, err, l.Fence)
	}
}

// TestNoRenewalExpires: a lease not renewed within its TTL is freed by the
// server, and a renewal afterwards never revives it.
func TestNoRenewalExpires(t *testing.T) {
	t.Parallel()
	var ended ends
	svc := newService(t, lockservice.Config{Observe: ended.observe}, nil)
	ctx := context.Background()
	l, _, err := svc.Acquire(ctx, "alice", "r1", req("k", lockservice.MinTTL, 0))
	if err != nil {
		t.Fatal(err)
	}
	ended.changed.Until(t, "the lease to expire", func() bool { return svc.Held() == 0 })
	var ee *lockservice.EndedError
	if _, err := svc.Renew(ctx, "alice", l.ID); !errors.As(err, &ee) || ee.State != lockservice.StateExpired {
		t.Fatalf("late renewal: %v", err)
	}
	if _, err := svc.Release(ctx, "alice", l.ID); !errors.As(err, &ee) {
		t.Fatalf("release after expiry: %v", err)
	}
	info, err := svc.Inspect(ctx, "alice", "jobs", "k", 0)
	if err != nil || info.Held {
		t.Fatalf("inspect after expiry: %+v %v", info, err)
	}
}

// TestRenewalKeepsItPastTTL: renewed within its TTL, a lease outlives it.
func TestRenewalKeepsItPastTTL(t *testing.T) {
	t.Parallel()
	svc := newService(t, lockservice.Config{}, nil)
	ctx := context.Background()
	const ttl = 2 * time.Second // well above a renewal's delay on a loaded machine
	l, _, err := svc.Acquire(ctx, "alice", "r1", req("k", ttl, 0))
	if err != nil {
		t.Fatal(err)
	}
	for range 8 { // 2 TTLs
		time.Sleep(ttl / 4) // time passes on purpose: the TTL is on the real clock
		if _, err := svc.Renew(ctx, "alice", l.ID); err != nil {
			t.Fatalf("renewal: %v", err)
		}
	}
	if _, err := svc.Release(ctx, "alice", l.ID); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// TestCloseEndsEverything: Close ends held leases (lost) and waiting
// acquires (ErrClosed), and later calls answer ErrClosed.
func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	svc := newService(t, lockservice.Config{}, nil)
	ctx := context.Background()
	l, _, err := svc.Acquire(ctx, "alice", "r1", req("k", 30*time.Second, 0))
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, _, err := svc.Acquire(ctx, "alice", "r2", req("k", 30*time.Second, time.Minute))
		waited <- err
	}()
	pollFor(t, "the second acquire to wait", func() bool {
		info, _ := svc.Inspect(ctx, "alice", "jobs", "k", 0)
		return info.Waiters == 1
	})
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, lockservice.ErrClosed) {
		t.Fatalf("waiter after Close: %v", err)
	}
	var ee *lockservice.EndedError
	if _, err := svc.Renew(ctx, "alice", l.ID); !errors.As(err, &ee) || ee.State != lockservice.StateLost {
		t.Fatalf("renew after Close: %v", err)
	}
	if _, _, err := svc.Acquire(ctx, "alice", "r3", req("k2", time.Second, 0)); !errors.Is(err, lockservice.ErrClosed) {
		t.Fatalf("acquire after Close: %v", err)
	}
}

// TestForgetAfterRetain: an ended lease is remembered for Retain, then
// forgotten: its renewals answer ErrNotFound and its request id is free.
func TestForgetAfterRetain(t *testing.T) {
	t.Parallel()
	// Retain is counted by a clock the test moves: the retry right after
	// the release comes within it, the next calls after it.
	const retain = 500 * time.Millisecond
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	svc := newService(t, lockservice.Config{Retain: retain, Now: clock}, nil)
	ctx := context.Background()
	l, _, err := svc.Acquire(ctx, "alice", "r1", req("k", time.Second, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Release(ctx, "alice", l.ID); err != nil {
		t.Fatal(err)
	}
	var ee *lockservice.EndedError
	if _, _, err := svc.Acquire(ctx, "alice", "r1", req("k", time.Second, 0)); !errors.As(err, &ee) {
		t.Fatalf("retry right after release: %v, want ended", err)
	}
	mu.Lock()
	now = now.Add(retain + time.Millisecond)
	mu.Unlock()
	if _, err := svc.Renew(ctx, "alice", l.ID); !errors.Is(err, lockservice.ErrNotFound) {
		t.Fatalf("renew of a forgotten lease: %v", err)
	}
	l2, _, err := svc.Acquire(ctx, "alice", "r1", req("k", time.Second, 0))
	if err != nil || l2.ID == l.ID {
		t.Fatalf("request id after forgetting: %+v %v", l2, err)
	}
}

// TestEngineKeysNeverCollide: different (actor, name, key) triples never
// make one engine key, and never one of studio's own keys.
func TestEngineKeysNeverCollide(t *testing.T) {
	t.Parallel()
	actors := []string{"a", "a b", "ab", "b", "é", "e\u0301"}
	names := []string{"n", "n:1", "n.1", "x", "1:n"}
	keys := []string{"k", "", "\x00", "n\x00k", "a\x00n\x00k", ":", "1:k", "k\x00"}
	seen := map[string][3]string{}
	for _, a := range actors {
		for _, n := range names {
			for _, k := range keys {
				ek := lockservice.EngineKey(a, n, k)
				if prev, dup := seen[ek]; dup {
					t.Fatalf("%q and %q make one engine key %q", prev, [3]string{a, n, k}, ek)
				}
				seen[ek] = [3]string{a, n, k}
				for _, studio := range []string{"intent\x00", "upload\x00", "generator/"} {
					if len(ek) >= len(studio) && ek[:len(studio)] == studio {
						t.Fatalf("engine key %q starts like studio's %q", ek, studio)
					}
				}
			}
		}
	}
}

// TestLongestKeyFits: the longest actor, name and key make an engine key
// the engine takes, and it is the key the service holds.
func TestLongestKeyFits(t *testing.T) {
	t.Parallel()
	svc, eng := newServiceEngine(t, lockservice.Config{}, nil)
	actor := strings.Repeat("é", 100)
	name := strings.Repeat("n", lockservice.MaxNameLen)
	key := strings.Repeat("\U0001F512", lockservice.MaxKeyLen)
	if err := locks.CheckKey(lockservice.EngineKey(actor, name, key)); err != nil {
		t.Fatalf("longest engine key: %v", err)
	}
	l, _, err := svc.Acquire(context.Background(), actor, "r", lockservice.Request{Name: name, Key: key, TTL: time.Second})
	if err != nil {
		t.Fatalf("acquire the longest key: %v", err)
	}
	info, err := eng.Inspect(context.Background(), lockservice.EngineKey(actor, name, key))
	if err != nil || !info.Held || info.Holders[0].Fence != l.Fence {
		t.Fatalf("the engine's view of the key: %+v %v, want held at fence %d", info, err, l.Fence)
	}
	if _, err := svc.Release(context.Background(), actor, l.ID); err != nil {
		t.Fatal(err)
	}
}

// TestMaxPerActor: an actor holds or waits for at most MaxPerActor leases;
// other actors are not affected, and a release makes room.
func TestMaxPerActor(t *testing.T) {
	t.Parallel()
	svc := newService(t, lockservice.Config{MaxPerActor: 2}, nil)
	ctx := context.Background()
	a, _, err := svc.Acquire(ctx, "alice", "r1", req("k1", time.Second, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Acquire(ctx, "alice", "r2", req("k2", time.Second, 0)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Acquire(ctx, "alice", "r3", req("k3", time.Second, 0)); !errors.Is(err, lockservice.ErrTooMany) {
		t.Fatalf("third lease: %v, want ErrTooMany", err)
	}
	// A retry of a held one is not a new lease.
	if _, replayed, err := svc.Acquire(ctx, "alice", "r1", req("k1", time.Second, 0)); err != nil || !replayed {
		t.Fatalf("retry at the cap: %v %v", replayed, err)
	}
	if _, _, err := svc.Acquire(ctx, "bob", "r1", req("k1", time.Second, 0)); err != nil {
		t.Fatalf("bob at alice's cap: %v", err)
	}
	if _, err := svc.Release(ctx, "alice", a.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Acquire(ctx, "alice", "r3", req("k3", time.Second, 0)); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}
