package lockstest

import (
	"errors"
	"testing"
	"time"

	"studio/locks"
)

// inspect calls Inspect or InspectSlots and fails the test on an error or
// a state that breaks the contract's form (no store time, holders out of
// fence order, a lease already over).
func inspect(t *testing.T, s locks.Store, slots bool, key string) locks.KeyState {
	t.Helper()
	var (
		st  locks.KeyState
		err error
	)
	if slots {
		st, err = s.InspectSlots(t.Context(), key)
	} else {
		st, err = s.Inspect(t.Context(), key)
	}
	if err != nil {
		t.Fatalf("Inspect(%q, slots %v): %v", key, slots, err)
	}
	if st.Now.IsZero() {
		t.Fatalf("Inspect(%q): no store time", key)
	}
	for i, h := range st.Holders {
		if i > 0 && h.Fence <= st.Holders[i-1].Fence {
			t.Fatalf("Inspect(%q): holders not in fence order: %+v", key, st.Holders)
		}
		if !h.Expires.After(st.Now) || h.Left != h.Expires.Sub(st.Now) {
			t.Fatalf("Inspect(%q): holder %+v at store time %v: over, or Left is not Expires - Now", key, h, st.Now)
		}
	}
	return st
}

// wantHolders fails unless st shows exactly these fences, each with left
// time to run.
func wantHolders(t *testing.T, st locks.KeyState, left time.Duration, fences ...int64) {
	t.Helper()
	if len(st.Holders) != len(fences) {
		t.Fatalf("%d holders %+v, want fences %v", len(st.Holders), st.Holders, fences)
	}
	for i, h := range st.Holders {
		if h.Fence != fences[i] || h.Left != left {
			t.Fatalf("holder %d = fence %d, %v left; want fence %d, %v left", i, h.Fence, h.Left, fences[i], left)
		}
	}
}

// testInspectLock: a free key shows no holder; a held one its fence and
// time left by the store's clock, through renewals, and none once released
// or expired; a semaphore of the same name is apart.
func testInspectLock(t *testing.T, f *Fixture) {
	s := f.Store
	wantHolders(t, inspect(t, s, false, "job"), 0)
	fence := mustAcquire(t, s, "job", "a", long)
	wantHolders(t, inspect(t, s, false, "job"), long, fence)
	wantHolders(t, inspect(t, s, true, "job"), 0)
	wantHolders(t, inspect(t, s, false, "job2"), 0)
	f.Clock.Advance(10 * time.Minute)
	wantHolders(t, inspect(t, s, false, "job"), long-10*time.Minute, fence)
	if !renew(t, s, "job", "a", 2*long) {
		t.Fatal("Renew by the holder refused")
	}
	wantHolders(t, inspect(t, s, false, "job"), 2*long, fence)
	if !release(t, s, "job", "a") {
		t.Fatal("Release by the holder refused")
	}
	wantHolders(t, inspect(t, s, false, "job"), 0)
	fence = mustAcquire(t, s, "job", "b", time.Second)
	wantHolders(t, inspect(t, s, false, "job"), time.Second, fence)
	f.Clock.Advance(time.Second)
	wantHolders(t, inspect(t, s, false, "job"), 0)
}

// testInspectSlots: a semaphore's live slots by fence, with the limit they
// were taken under; expired and released slots gone.
func testInspectSlots(t *testing.T, f *Fixture) {
	s := f.Store
	st := inspect(t, s, true, "gen")
	wantHolders(t, st, 0)
	a := mustSlot(t, s, "gen", "a", 3)
	f.Clock.Advance(time.Minute)
	b := mustSlot(t, s, "gen", "b", 3)
	st = inspect(t, s, true, "gen")
	if len(st.Holders) != 2 || st.Holders[0].Fence != a || st.Holders[1].Fence != b ||
		st.Holders[0].Left != long-time.Minute || st.Holders[1].Left != long {
		t.Fatalf("holders %+v, want fences %d (%v left), %d (%v left)", st.Holders, a, long-time.Minute, b, long)
	}
	if st.Limit != 3 {
		t.Fatalf("limit %d, want 3", st.Limit)
	}
	wantHolders(t, inspect(t, s, false, "gen"), 0)
	if !releaseSlot(t, s, "gen", "a") {
		t.Fatal("ReleaseSlot by the holder refused")
	}
	wantHolders(t, inspect(t, s, true, "gen"), long, b)
	f.Clock.Advance(long)
	if st := inspect(t, s, true, "gen"); len(st.Holders) != 0 || st.Limit != 0 {
		t.Fatalf("after expiry: %+v, want no holders and limit 0", st)
	}
}

// testLimitConflict: while a semaphore key has live slots under one limit,
// an acquisition under another fails with ErrLimitConflict and takes
// nothing; once they are gone, a new limit is fine.
func testLimitConflict(t *testing.T, f *Fixture) {
	s := f.Store
	mustSlot(t, s, "gen", "a", 2)
	for _, limit := range []int{1, 3} {
		_, ok, err := s.AcquireSlot(t.Context(), "gen", "b", limit, long)
		if !errors.Is(err, locks.ErrLimitConflict) || ok {
			t.Fatalf("AcquireSlot under limit %d while held under 2 = %v, %v; want ErrLimitConflict", limit, ok, err)
		}
	}
	if st := inspect(t, s, true, "gen"); len(st.Holders) != 1 || st.Limit != 2 {
		t.Fatalf("after refused acquisitions: %+v, want the one holder under limit 2", st)
	}
	mustSlot(t, s, "gen", "c", 2)
	if !releaseSlot(t, s, "gen", "a") || !releaseSlot(t, s, "gen", "c") {
		t.Fatal("ReleaseSlot by the holders refused")
	}
	mustSlot(t, s, "gen", "d", 5)
	if st := inspect(t, s, true, "gen"); st.Limit != 5 {
		t.Fatalf("limit %d after every holder left and one came under 5, want 5", st.Limit)
	}
	// An expired slot does not hold its limit either.
	mustSlot(t, s, "other", "a", 1)
	f.Clock.Advance(long)
	mustSlot(t, s, "other", "b", 4)
}
