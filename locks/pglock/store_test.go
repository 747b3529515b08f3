package pglock

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
)

// stoppedClock is the lock store's clock in tests.
type stoppedClock struct{ ns atomic.Int64 }

func newStoppedClock() *stoppedClock {
	c := &stoppedClock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *stoppedClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *stoppedClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }

func openLockDB(t testing.TB, url, schema string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(context.Background(), withSearchPath(t, url, schema), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestLockStoreConformance(t *testing.T) {
	lockstest.Run(t, func(t *testing.T) *lockstest.Fixture {
		schema := testSchema(t)
		base := testURL(t)
		db := openLockDB(t, base, schema)
		clock := newStoppedClock()
		ls := db
		ls.clock = clock.now
		return &lockstest.Fixture{
			Store: ls,
			Clock: clock,
			Reopen: func(t *testing.T) locks.Store {
				db.Close()
				db = openLockDB(t, base, schema)
				ls = db
				ls.clock = clock.now
				return ls
			},
			SetFence: func(t *testing.T, v int64) {
				if _, err := db.Pool().Exec(context.Background(), `SELECT setval('lock_fence', $1)`, v); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}

// TestLockStoreRealClock runs on the database's own clock: leases are
// written in its time and end by it.
func TestLockStoreRealClock(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	db := openLockDB(t, testURL(t), schema)
	s := db
	ctx := t.Context()
	if _, ok, err := s.Acquire(ctx, "long", "a", time.Hour); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	var left time.Duration
	if err := db.Pool().QueryRow(ctx, `SELECT expires_at - clock_timestamp() FROM locks WHERE key = $1`, []byte("long")).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left <= 0 || left > time.Hour {
		t.Fatalf("lease ends in %v by the database's clock, want within the hour", left)
	}
	if _, ok, err := s.Acquire(ctx, "long", "b", time.Hour); err != nil || ok {
		t.Fatalf("second Acquire: %v, %v; want refused", ok, err)
	}
	lockstest.ShortLeasesEnd(t, s, nil)
}

func TestLockSweep(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	db := openLockDB(t, testURL(t), schema)
	clock := newStoppedClock()
	s := db
	s.clock = clock.now
	ctx := t.Context()
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		if _, ok, err := s.Acquire(ctx, key, "dead", time.Millisecond); err != nil || !ok {
			t.Fatalf("Acquire: %v, %v", ok, err)
		}
		if _, ok, err := s.AcquireSlot(ctx, key, "dead", 3, time.Millisecond); err != nil || !ok {
			t.Fatalf("AcquireSlot: %v, %v", ok, err)
		}
	}
	if _, ok, err := s.Acquire(ctx, "live", "a", time.Hour); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	clock.Advance(time.Millisecond)
	count := func() (n int) {
		t.Helper()
		if err := db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM locks) + (SELECT count(*) FROM lock_slots)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 21 {
		t.Fatalf("%d rows before the sweep, want 21", n)
	}
	s.acquisitions.Store(sweepEvery - 1)
	if _, ok, err := s.Acquire(ctx, "next", "a", time.Hour); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d rows after the sweep, want the 2 live ones", n)
	}
}

// TestLockEngineAcrossStores: two engines, each on its own pool (as two
// processes), meet only in the database.
func TestLockEngineAcrossStores(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	lockstest.EnginesExclude(t, func(t *testing.T) locks.Store { return openLockDB(t, testURL(t), schema) })
}

// TestLockFenceOrderWithASlowStatement: an acquisition draws its fence
// from the sequence before its row reaches the key. A trigger (test only)
// makes one acquisition sleep between the two; another acquisition of the
// same key meanwhile must not be handed a larger fence and then be followed
// by the slow one with its smaller fence.
func TestLockFenceOrderWithASlowStatement(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	db := openLockDB(t, testURL(t), schema)
	ctx := t.Context()
	if _, err := db.Pool().Exec(ctx, `CREATE FUNCTION slow_lock() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.owner LIKE 'slow%' THEN PERFORM pg_sleep(0.3); END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER slow_lock BEFORE INSERT ON locks FOR EACH ROW EXECUTE FUNCTION slow_lock();
		CREATE TRIGGER slow_slot BEFORE INSERT ON lock_slots FOR EACH ROW EXECUTE FUNCTION slow_lock();`); err != nil {
		t.Fatal(err)
	}
	s := db
	type result struct {
		fence int64
		ok    bool
		err   error
	}
	for _, sp := range []struct {
		name    string
		acquire func(owner string) (int64, bool, error)
		release func(owner string) (bool, error)
	}{
		{"lock", func(o string) (int64, bool, error) { return s.Acquire(ctx, "k", o, time.Hour) },
			func(o string) (bool, error) { return s.Release(ctx, "k", o) }},
		{"slot", func(o string) (int64, bool, error) { return s.AcquireSlot(ctx, "k", o, 1, time.Hour) },
			func(o string) (bool, error) { return s.ReleaseSlot(ctx, "k", o) }},
	} {
		drawn := func() (n int64) {
			t.Helper()
			if err := db.Pool().QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lock_fence`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := drawn()
		slow := make(chan result, 1)
		go func() {
			f, ok, err := sp.acquire("slow")
			slow <- result{f, ok, err}
		}()
		// Go on once the slow one has drawn its fence: its trigger then
		// holds its row back for 300 ms.
		for deadline := time.Now().Add(10 * time.Second); drawn() == before; {
			if time.Now().After(deadline) {
				t.Fatal("the slow acquisition drew no fence within 10 s")
			}
			time.Sleep(time.Millisecond)
		}
		fast, fastOK, err := sp.acquire("fast")
		if err != nil {
			t.Fatal(err)
		}
		if fastOK {
			if _, err := sp.release("fast"); err != nil {
				t.Fatal(err)
			}
		}
		r := <-slow
		if r.err != nil {
			t.Fatal(r.err)
		}
		if fastOK && r.ok && r.fence <= fast {
			t.Fatalf("%s: fence %d taken after fence %d of the same key", sp.name, r.fence, fast)
		}
		if !fastOK && !r.ok {
			t.Fatalf("%s: neither acquisition of a free key succeeded", sp.name)
		}
		if r.ok {
			if _, err := sp.release("slow"); err != nil {
				t.Fatal(err)
			}
		}
	}
}
