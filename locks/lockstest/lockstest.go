// Package lockstest is the conformance suite of locks.Store: one set of
// tests that every store passes, whatever keeps its leases. A store's test
// file calls Run with a function that opens a fresh store:
//
//	func TestLockStore(t *testing.T) {
//		lockstest.Run(t, func(t *testing.T) *lockstest.Fixture {
//			s := openMyStore(t)             // fresh and empty; close it in t.Cleanup
//			return &lockstest.Fixture{
//				Store:  s,
//				Clock:  s.testClock(),      // the store's clock, stopped
//				Reopen: func(t *testing.T) locks.Store { ... }, // optional
//				SetFence: func(t *testing.T, v int64) { ... }, // optional
//			}
//		})
//	}
//
// The suite needs to move the store's clock by hand: a SQL store can take
// "now" from a bound parameter when a test sets one (see the SQLite lock
// store for an example: COALESCE(?, the database's clock)).
//
// Tests that need more than a Fixture a store's test file calls itself:
// ShortLeasesEnd (the store on its own clock), EnginesExclude (two
// engines on two stores of the same data), and StartWaiter with
// ServeWaiter (a waiter in another OS process).
package lockstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"studio/locks"
)

// Fixture is one fresh store under test and the hooks the suite needs.
type Fixture struct {
	// Store is empty and used by this test only.
	Store locks.Store
	// Clock is the store's clock, stopped: the store's time moves only
	// when Advance is called. Required.
	Clock Clock
	// Reopen closes Store and opens the same data again, as a restart of
	// every process would. The clock stays the same. Nil if the store
	// cannot; the tests that need it are then skipped, saying so.
	Reopen func(t *testing.T) locks.Store
	// SetFence makes the next acquisition of a key never acquired before
	// get fence v+1 (for a lock or a semaphore slot); the suite uses a v
	// close to MaxFence. Nil skips the exhaustion test, saying so.
	SetFence func(t *testing.T, v int64)
}

// Clock moves a store's stopped clock.
type Clock interface {
	Advance(d time.Duration)
}

// FakeClock is a Clock for stores that take a func() time.Time, such as
// locks.NewMemoryStoreClock. It is safe for concurrent use.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a clock stopped at start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Run runs the whole suite, each test on a store from open.
func Run(t *testing.T, open func(t *testing.T) *Fixture) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, f *Fixture)
	}{
		{"AcquireRelease", testAcquireRelease},
		{"NotReentrant", testNotReentrant},
		{"RacingAcquireFree", testRacingAcquireFree},
		{"RacingAcquireExpired", testRacingAcquireExpired},
		{"FenceGrowsAcrossRelease", testFenceAcrossRelease},
		{"FenceGrowsAcrossExpiry", testFenceAcrossExpiry},
		{"FenceGrowsAcrossReopen", testFenceAcrossReopen},
		{"FenceNeverPassesMax", testFenceExhausted},
		{"RenewExtends", testRenewExtends},
		{"RenewAfterExpiryFails", testRenewAfterExpiry},
		{"StaleOwnerChangesNothing", testStaleOwner},
		{"ReleaseTwice", testReleaseTwice},
		{"ExactKeys", testExactKeys},
		{"TTLOneMillisecond", testTTLMin},
		{"TTLSubMillisecondRoundsUp", testTTLRounding},
		{"TTLThirtyDays", testTTLMax},
		{"CanceledContext", testCanceledContext},
		{"SemaphoreCapacity", testSemaphoreCapacity},
		{"SemaphoreRacingAcquire", testSemaphoreRacing},
		{"SemaphoreRacingAfterExpiry", testSemaphoreRacingExpired},
		{"SemaphoreStaleOwner", testSemaphoreStale},
		{"SemaphoreFencesGrow", testSemaphoreFences},
		{"SemaphoreLimitBelowOne", testLimitBelowOne},
		{"LocksAndSemaphoresApart", testKeySpacesApart},
		{"InspectLock", testInspectLock},
		{"InspectSlots", testInspectSlots},
		{"SemaphoreLimitConflict", testLimitConflict},
		{"LinearizableLock", testLinearizableLock},
		{"LinearizableSemaphore", testLinearizableSemaphore},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := open(t)
			if f == nil || f.Store == nil || f.Clock == nil {
				t.Fatal("lockstest: the fixture needs a Store and a Clock")
			}
			tc.fn(t, f)
		})
	}
}

const long = time.Hour // a TTL no test outlives unless it advances the clock

// acquire calls Acquire and fails the test on an error.
func acquire(t *testing.T, s locks.Store, key, owner string, ttl time.Duration) (int64, bool) {
	t.Helper()
	f, ok, err := s.Acquire(t.Context(), key, owner, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", key, owner, err)
	}
	if ok && (f < 1 || f > locks.MaxFence) {
		t.Fatalf("Acquire(%q, %q): fence %d outside 1..MaxFence", key, owner, f)
	}
	return f, ok
}

func mustAcquire(t *testing.T, s locks.Store, key, owner string, ttl time.Duration) int64 {
	t.Helper()
	f, ok := acquire(t, s, key, owner, ttl)
	if !ok {
		t.Fatalf("Acquire(%q, %q) = not acquired, want acquired", key, owner)
	}
	return f
}

func mustNotAcquire(t *testing.T, s locks.Store, key, owner string) {
	t.Helper()
	if _, ok := acquire(t, s, key, owner, long); ok {
		t.Fatalf("Acquire(%q, %q) = acquired, want refused (key held)", key, owner)
	}
}

func renew(t *testing.T, s locks.Store, key, owner string, ttl time.Duration) bool {
	t.Helper()
	ok, err := s.Renew(t.Context(), key, owner, ttl)
	if err != nil {
		t.Fatalf("Renew(%q, %q): %v", key, owner, err)
	}
	return ok
}

func release(t *testing.T, s locks.Store, key, owner string) bool {
	t.Helper()
	ok, err := s.Release(t.Context(), key, owner)
	if err != nil {
		t.Fatalf("Release(%q, %q): %v", key, owner, err)
	}
	return ok
}

func acquireSlot(t *testing.T, s locks.Store, key, owner string, limit int, ttl time.Duration) (int64, bool) {
	t.Helper()
	f, ok, err := s.AcquireSlot(t.Context(), key, owner, limit, ttl)
	if err != nil {
		t.Fatalf("AcquireSlot(%q, %q, %d): %v", key, owner, limit, err)
	}
	if ok && (f < 1 || f > locks.MaxFence) {
		t.Fatalf("AcquireSlot(%q, %q): fence %d outside 1..MaxFence", key, owner, f)
	}
	return f, ok
}

func renewSlot(t *testing.T, s locks.Store, key, owner string, ttl time.Duration) bool {
	t.Helper()
	ok, err := s.RenewSlot(t.Context(), key, owner, ttl)
	if err != nil {
		t.Fatalf("RenewSlot(%q, %q): %v", key, owner, err)
	}
	return ok
}

func releaseSlot(t *testing.T, s locks.Store, key, owner string) bool {
	t.Helper()
	ok, err := s.ReleaseSlot(t.Context(), key, owner)
	if err != nil {
		t.Fatalf("ReleaseSlot(%q, %q): %v", key, owner, err)
	}
	return ok
}

func testAcquireRelease(t *testing.T, f *Fixture) {
	s := f.Store
	f1 := mustAcquire(t, s, "job", "a", long)
	mustNotAcquire(t, s, "job", "b")
	if !renew(t, s, "job", "a", long) {
		t.Fatal("Renew by the holder refused")
	}
	if !release(t, s, "job", "a") {
		t.Fatal("Release by the holder answered false")
	}
	f2 := mustAcquire(t, s, "job", "b", long)
	if f2 <= f1 {
		t.Fatalf("fence after release %d, want > %d", f2, f1)
	}
}

func testNotReentrant(t *testing.T, f *Fixture) {
	s := f.Store
	mustAcquire(t, s, "job", "a", long)
	mustNotAcquire(t, s, "job", "a")
	if !release(t, s, "job", "a") {
		t.Fatal("Release after a refused re-acquire answered false")
	}
}

// race runs n calls of fn at once (as far as a barrier allows) and returns
// how many answered true and their fences.
func race(t *testing.T, n int, fn func(i int) (int64, bool, error)) (wins []int, fences []int64) {
	t.Helper()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  []error
	)
	for i := range n {
		wg.Go(func() {
			<-start
			f, ok, err := fn(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				wins = append(wins, i)
				fences = append(fences, f)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		t.Errorf("racing call: %v", err)
	}
	return wins, fences
}

const racers = 32

func testRacingAcquireFree(t *testing.T, f *Fixture) {
	s := f.Store
	for round := range 10 {
		key := fmt.Sprintf("free-%d", round)
		wins, _ := race(t, racers, func(i int) (int64, bool, error) {
			return s.Acquire(context.Background(), key, fmt.Sprintf("o%d", i), long)
		})
		if len(wins) != 1 {
			t.Fatalf("round %d: %d winners of %d racers on a free key, want exactly 1", round, len(wins), racers)
		}
		for i := range racers {
			want := i == wins[0]
			if got := renew(t, s, key, fmt.Sprintf("o%d", i), long); got != want {
				t.Fatalf("round %d: Renew by racer %d = %v, want %v (winner %d)", round, i, got, want, wins[0])
			}
		}
	}
}

func testRacingAcquireExpired(t *testing.T, f *Fixture) {
	s := f.Store
	for round := range 10 {
		key := fmt.Sprintf("expired-%d", round)
		old := mustAcquire(t, s, key, "old", 10*time.Millisecond)
		f.Clock.Advance(10 * time.Millisecond) // expiry is at exactly now: expired
		wins, fences := race(t, racers, func(i int) (int64, bool, error) {
			return s.Acquire(context.Background(), key, fmt.Sprintf("o%d", i), long)
		})
		if len(wins) != 1 {
			t.Fatalf("round %d: %d winners of %d racers on an expired key, want exactly 1", round, len(wins), racers)
		}
		if fences[0] <= old {
			t.Fatalf("round %d: fence %d after expiry, want > %d", round, fences[0], old)
		}
		if renew(t, s, key, "old", long) {
			t.Fatalf("round %d: the expired owner renewed", round)
		}
	}
}

func testFenceAcrossRelease(t *testing.T, f *Fixture) {
	s := f.Store
	last := int64(0)
	for i := range 20 {
		owner := fmt.Sprintf("o%d", i)
		fence := mustAcquire(t, s, "k", owner, long)
		if fence <= last {
			t.Fatalf("acquisition %d: fence %d, want > %d", i, fence, last)
		}
		last = fence
		if !release(t, s, "k", owner) {
			t.Fatalf("acquisition %d: release answered false", i)
		}
	}
}

func testFenceAcrossExpiry(t *testing.T, f *Fixture) {
	s := f.Store
	last := int64(0)
	for i := range 10 {
		fence := mustAcquire(t, s, "k", fmt.Sprintf("o%d", i), 5*time.Millisecond)
		if fence <= last {
			t.Fatalf("acquisition %d: fence %d, want > %d", i, fence, last)
		}
		last = fence
		f.Clock.Advance(5 * time.Millisecond)
	}
}

func testFenceAcrossReopen(t *testing.T, f *Fixture) {
	if f.Reopen == nil {
		t.Skip("lockstest: the fixture has no Reopen; fences across restarts are not tested for this store")
	}
	s := f.Store
	var last int64
	for i := range 5 {
		last = mustAcquire(t, s, "k", fmt.Sprintf("o%d", i), long)
		release(t, s, "k", fmt.Sprintf("o%d", i))
	}
	lastOther := mustAcquire(t, s, "other", "x", 5*time.Millisecond) // left to expire
	f.Clock.Advance(5 * time.Millisecond)
	for range 2 {
		s = f.Reopen(t)
		fence := mustAcquire(t, s, "k", "after", long)
		if fence <= last {
			t.Fatalf("fence after reopen %d, want > %d", fence, last)
		}
		last = fence
		release(t, s, "k", "after")
		fence = mustAcquire(t, s, "other", "y", long)
		if fence <= lastOther {
			t.Fatalf("fence of an expired key after reopen %d, want > %d", fence, lastOther)
		}
		lastOther = fence
		release(t, s, "other", "y")
	}
}

func testFenceExhausted(t *testing.T, f *Fixture) {
	if f.SetFence == nil {
		t.Skip("lockstest: the fixture has no SetFence; the 2^53-1 cap is not tested for this store")
	}
	s := f.Store
	type space struct {
		name    string
		acquire func(owner string) (int64, bool, error)
		release func(owner string) bool
	}
	spaces := []space{
		{"lock", func(o string) (int64, bool, error) { return s.Acquire(t.Context(), "k", o, long) },
			func(o string) bool { return release(t, s, "k", o) }},
		{"slot", func(o string) (int64, bool, error) { return s.AcquireSlot(t.Context(), "k", o, 2, long) },
			func(o string) bool { return releaseSlot(t, s, "k", o) }},
	}
	for _, sp := range spaces {
		// Fences grow to MaxFence and stop there: two more at most.
		f.SetFence(t, locks.MaxFence-2)
		var last int64
		for i := 0; ; i++ {
			owner := fmt.Sprintf("o%d", i)
			fence, ok, err := sp.acquire(owner)
			if errors.Is(err, locks.ErrFenceExhausted) && !ok {
				if last != locks.MaxFence {
					t.Fatalf("%s: exhausted after fence %d, want after MaxFence", sp.name, last)
				}
				break
			}
			if err != nil || !ok {
				t.Fatalf("%s: acquisition %d = %d, %v, %v", sp.name, i, fence, ok, err)
			}
			if fence <= last || fence > locks.MaxFence || fence < locks.MaxFence-1 {
				t.Fatalf("%s: fence %d after %d, want MaxFence-1 then MaxFence", sp.name, fence, last)
			}
			last = fence
			if !sp.release(owner) {
				t.Fatalf("%s: release of fence %d answered false", sp.name, fence)
			}
			if i > 2 {
				t.Fatalf("%s: still acquiring after %d acquisitions from MaxFence-2", sp.name, i+1)
			}
		}
	}
}

func testRenewExtends(t *testing.T, f *Fixture) {
	s := f.Store
	mustAcquire(t, s, "k", "a", 10*time.Millisecond)
	f.Clock.Advance(6 * time.Millisecond)
	if !renew(t, s, "k", "a", 10*time.Millisecond) {
		t.Fatal("Renew of a live lease refused")
	}
	f.Clock.Advance(6 * time.Millisecond) // 12 ms after acquire, 6 after renew
	mustNotAcquire(t, s, "k", "b")
	f.Clock.Advance(4 * time.Millisecond) // 10 ms after renew
	mustAcquire(t, s, "k", "b", long)
}

func testRenewAfterExpiry(t *testing.T, f *Fixture) {
	s := f.Store
	mustAcquire(t, s, "k", "a", 10*time.Millisecond)
	f.Clock.Advance(10 * time.Millisecond)
	if renew(t, s, "k", "a", long) {
		t.Fatal("Renew of an expired lease succeeded")
	}
	if renew(t, s, "k", "a", long) {
		t.Fatal("second Renew of an expired lease succeeded")
	}
	// Never revived: the key is free.
	mustAcquire(t, s, "k", "b", long)
	if release(t, s, "k", "a") {
		t.Fatal("Release by the expired owner answered true")
	}
	mustNotAcquire(t, s, "k", "c")
}

func testStaleOwner(t *testing.T, f *Fixture) {
	s := f.Store
	mustAcquire(t, s, "k", "old", 10*time.Millisecond)
	f.Clock.Advance(time.Second)
	mustAcquire(t, s, "k", "new", 10*time.Millisecond)
	if renew(t, s, "k", "old", long) {
		t.Fatal("Renew by a stale owner succeeded")
	}
	if release(t, s, "k", "old") {
		t.Fatal("Release by a stale owner answered true")
	}
	// The new owner's lease is untouched: still held, still 10 ms long.
	mustNotAcquire(t, s, "k", "other")
	f.Clock.Advance(10 * time.Millisecond)
	if renew(t, s, "k", "new", long) {
		t.Fatal("the stale owner's Renew extended the new owner's lease")
	}
	if renew(t, s, "k", "never", long) || release(t, s, "never-held", "x") {
		t.Fatal("Renew or Release of an owner that never held answered true")
	}
}

func testReleaseTwice(t *testing.T, f *Fixture) {
	s := f.Store
	mustAcquire(t, s, "k", "a", long)
	if !release(t, s, "k", "a") {
		t.Fatal("first Release answered false")
	}
	if release(t, s, "k", "a") {
		t.Fatal("second Release answered true")
	}
	if renew(t, s, "k", "a", long) {
		t.Fatal("Renew after Release succeeded")
	}
}

// ExactKeys are keys a store must keep apart: they differ only by case,
// whitespace, Unicode normalization, compatibility forms, an embedded NUL,
// SQL wildcards, or their last of 500 characters.
var ExactKeys = []string{
	"key", "Key", "KEY", "key ", " key", "key\t", "key\n",
	"\u00e9", "e\u0301", // é: NFC and NFD
	"\u00c5", "A\u030a", "\u212b", // Å, A + ring, Angstrom sign
	"\u00df", "ss", "SS", "\u1e9e", // ß, ss, SS, capital sharp s
	"\ufb01", "fi", // ligature fi
	"\u0130", "i", "I", "\u0131", // Turkish dotted and dotless i
	"a\x00b", "a", "a\x00", // embedded NUL
	"%", "_", "'", "\"", "\\", "a%", "a_",
	"\u200b", "\u00a0", " ", // zero-width space, no-break space, space
	"🔒", "\U0001f512\ufe0f",
	strings.Repeat("字", locks.MaxKeyLen),
	strings.Repeat("字", locks.MaxKeyLen-1) + "子",
	strings.Repeat("字", locks.MaxKeyLen-1),
	strings.Repeat("a", locks.MaxKeyLen),
	strings.Repeat("a", locks.MaxKeyLen-1) + "A",
}

func testExactKeys(t *testing.T, f *Fixture) {
	s := f.Store
	keys := ExactKeys
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Fatalf("lockstest: key %q listed twice", k)
		}
		seen[k] = true
		if err := locks.CheckKey(k); err != nil {
			t.Fatalf("lockstest: key %q: %v", k, err)
		}
	}
	owner := func(i int) string { return fmt.Sprintf("owner-%d", i) }
	for i, k := range keys {
		mustAcquire(t, s, k, owner(i), long)
		mustSlot(t, s, k, owner(i), 1)
	}
	// Every key was free although all the others were held: no two share
	// a lease. The owner of each key's neighbours in the list (the keys
	// most alike) cannot touch it either.
	for i, k := range keys {
		for _, j := range []int{(i + 1) % len(keys), (i + len(keys) - 1) % len(keys)} {
			if renew(t, s, k, owner(j), long) || release(t, s, k, owner(j)) {
				t.Fatalf("owner of %q renewed or released %q", keys[j], k)
			}
			if renewSlot(t, s, k, owner(j), long) || releaseSlot(t, s, k, owner(j)) {
				t.Fatalf("slot owner of %q renewed or released a slot of %q", keys[j], k)
			}
		}
	}
	for i, k := range keys {
		if !release(t, s, k, owner(i)) || !releaseSlot(t, s, k, owner(i)) {
			t.Fatalf("holder of %q could not release it", k)
		}
	}
}

func mustSlot(t *testing.T, s locks.Store, key, owner string, limit int) int64 {
	t.Helper()
	f, ok := acquireSlot(t, s, key, owner, limit, long)
	if !ok {
		t.Fatalf("AcquireSlot(%q, %q, %d) refused, want acquired", key, owner, limit)
	}
	return f
}

func testTTLMin(t *testing.T, f *Fixture) {
	s := f.Store
	mustAcquire(t, s, "k", "a", locks.MinTTL)
	mustNotAcquire(t, s, "k", "b")
	f.Clock.Advance(locks.MinTTL)
	mustAcquire(t, s, "k", "b", locks.MinTTL)
	if !renew(t, s, "k", "b", locks.MinTTL) {
		t.Fatal("Renew with the minimum TTL refused")
	}
	mustSlot(t, s, "k", "c", 1)
	f.Clock.Advance(locks.MinTTL)
	mustAcquire(t, s, "k", "d", long)
}

func testTTLRounding(t *testing.T, f *Fixture) {
	s := f.Store
	mustAcquire(t, s, "k", "a", 1500*time.Microsecond)
	f.Clock.Advance(time.Millisecond)
	mustNotAcquire(t, s, "k", "b") // never shorter than asked
	f.Clock.Advance(time.Millisecond)
	mustAcquire(t, s, "k", "b", long) // and never a whole unit longer
}

func testTTLMax(t *testing.T, f *Fixture) {
	s := f.Store
	mustAcquire(t, s, "k", "a", locks.MaxTTL)
	if _, ok := acquireSlot(t, s, "k", "a", 1, locks.MaxTTL); !ok {
		t.Fatal("slot with a 30-day TTL refused on a free semaphore")
	}
	f.Clock.Advance(locks.MaxTTL - time.Millisecond)
	mustNotAcquire(t, s, "k", "b")
	if _, ok := acquireSlot(t, s, "k", "b", 1, long); ok {
		t.Fatal("slot with a 30-day TTL gone before 30 days")
	}
	if !renew(t, s, "k", "a", locks.MaxTTL) || !renewSlot(t, s, "k", "a", locks.MaxTTL) {
		t.Fatal("Renew with a 30-day TTL refused")
	}
	f.Clock.Advance(locks.MaxTTL - time.Millisecond)
	mustNotAcquire(t, s, "k", "b")
	f.Clock.Advance(time.Millisecond)
	mustAcquire(t, s, "k", "b", long)
	mustSlot(t, s, "k", "b", 1)
}

func testCanceledContext(t *testing.T, f *Fixture) {
	s := f.Store
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, ok, err := s.Acquire(ctx, "k", "a", long); err == nil || ok {
		t.Fatalf("Acquire with a canceled context = %v, %v; want an error", ok, err)
	}
	if _, ok, err := s.AcquireSlot(ctx, "k", "a", 1, long); err == nil || ok {
		t.Fatalf("AcquireSlot with a canceled context = %v, %v; want an error", ok, err)
	}
	mustAcquire(t, s, "k", "b", long)
	mustSlot(t, s, "k", "b", 1)
}

func testSemaphoreCapacity(t *testing.T, f *Fixture) {
	s := f.Store
	var last int64
	for i := range 3 {
		fence := mustSlot(t, s, "gen", fmt.Sprintf("o%d", i), 3)
		if fence <= last {
			t.Fatalf("slot fence %d, want > %d", fence, last)
		}
		last = fence
	}
	if _, ok := acquireSlot(t, s, "gen", "o3", 3, long); ok {
		t.Fatal("a fourth slot of three was granted")
	}
	if !renewSlot(t, s, "gen", "o1", long) {
		t.Fatal("RenewSlot by a holder refused")
	}
	if !releaseSlot(t, s, "gen", "o1") {
		t.Fatal("ReleaseSlot by a holder answered false")
	}
	mustSlot(t, s, "gen", "o3", 3)
	if _, ok := acquireSlot(t, s, "gen", "o4", 3, long); ok {
		t.Fatal("a slot was granted past the limit after a release")
	}
}

func testSemaphoreRacing(t *testing.T, f *Fixture) {
	s := f.Store
	for round, limit := range []int{1, 2, 5, 31, 32, 40} {
		key := fmt.Sprintf("sem-%d", round)
		mustSlot(t, s, key, "pre", limit+1) // one slot already taken
		wins, _ := race(t, racers, func(i int) (int64, bool, error) {
			return s.AcquireSlot(context.Background(), key, fmt.Sprintf("o%d", i), limit+1, long)
		})
		if want := min(limit, racers); len(wins) != want {
			t.Fatalf("limit %d with one taken: %d of %d racers won, want exactly %d", limit+1, len(wins), racers, want)
		}
	}
}

func testSemaphoreRacingExpired(t *testing.T, f *Fixture) {
	s := f.Store
	const limit = 5
	for i := range limit {
		mustSlot(t, s, "sem", fmt.Sprintf("old%d", i), limit)
	}
	if _, ok := acquireSlot(t, s, "sem", "x", limit, long); ok {
		t.Fatal("slot granted on a full semaphore")
	}
	f.Clock.Advance(long)
	wins, _ := race(t, racers, func(i int) (int64, bool, error) {
		return s.AcquireSlot(context.Background(), "sem", fmt.Sprintf("o%d", i), limit, long)
	})
	if len(wins) != limit {
		t.Fatalf("%d racers won %d expired slots, want exactly %d", len(wins), limit, limit)
	}
}

func testSemaphoreStale(t *testing.T, f *Fixture) {
	s := f.Store
	mustSlot(t, s, "sem", "old", 1)
	f.Clock.Advance(long)
	if renewSlot(t, s, "sem", "old", long) {
		t.Fatal("RenewSlot of an expired slot succeeded")
	}
	mustSlot(t, s, "sem", "new", 1)
	if renewSlot(t, s, "sem", "old", long) || releaseSlot(t, s, "sem", "old") {
		t.Fatal("a stale slot owner renewed or released")
	}
	if _, ok := acquireSlot(t, s, "sem", "x", 1, long); ok {
		t.Fatal("the stale owner's release freed the new owner's slot")
	}
	if !releaseSlot(t, s, "sem", "new") || releaseSlot(t, s, "sem", "new") {
		t.Fatal("ReleaseSlot should answer true once, then false")
	}
}

func testSemaphoreFences(t *testing.T, f *Fixture) {
	s := f.Store
	var last int64
	for i := range 10 {
		owner := fmt.Sprintf("o%d", i)
		fence := mustSlot(t, s, "sem", owner, 2)
		if fence <= last {
			t.Fatalf("slot fence %d, want > %d", fence, last)
		}
		last = fence
		if i%2 == 0 {
			releaseSlot(t, s, "sem", owner)
		} else {
			f.Clock.Advance(long)
		}
	}
}

func testLimitBelowOne(t *testing.T, f *Fixture) {
	for _, limit := range []int{0, -1} {
		if _, _, err := f.Store.AcquireSlot(t.Context(), "k", "a", limit, long); !errors.Is(err, locks.ErrInvalid) {
			t.Fatalf("AcquireSlot with limit %d: %v, want ErrInvalid", limit, err)
		}
	}
}

func testKeySpacesApart(t *testing.T, f *Fixture) {
	s := f.Store
	mustAcquire(t, s, "k", "a", long)
	mustSlot(t, s, "k", "b", 1)
	if release(t, s, "k", "b") || releaseSlot(t, s, "k", "a") {
		t.Fatal("a lock owner released a slot or the other way round")
	}
	if !release(t, s, "k", "a") || !releaseSlot(t, s, "k", "b") {
		t.Fatal("holders could not release")
	}
}

// TakenBefore checks a store opened on tables where owner took key (a
// plain lock, with fence first) before this store was opened, as another
// program or an older one would have: the key shows that holder, and once
// it is released an engine on the store takes the key under a higher
// fence.
func TakenBefore(t *testing.T, s locks.Store, key, owner string, first int64) {
	t.Helper()
	ctx := t.Context()
	e := locks.New(s)
	defer e.Close()
	info, err := e.Inspect(ctx, key)
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Fence != first {
		t.Fatalf("the lock taken before: %+v, %v", info, err)
	}
	if ok, err := s.Release(ctx, key, owner); !ok || err != nil {
		t.Fatalf("release the lock taken before: %v, %v", ok, err)
	}
	if err := e.Hold(ctx, key, func(_ context.Context, l *locks.Lease) error {
		if l.Fence() <= first {
			t.Errorf("fence %d after %d", l.Fence(), first)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
