package sqlitelock

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
)

// stoppedClock is a test clock for the lock store, in nanoseconds (the
// store reads whole milliseconds of it).
type stoppedClock struct{ ns atomic.Int64 }

func newStoppedClock() *stoppedClock {
	c := &stoppedClock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *stoppedClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *stoppedClock) ms() int64               { return c.ns.Load() / int64(time.Millisecond) }

func openLockDB(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestLockStoreConformance(t *testing.T) {
	lockstest.Run(t, func(t *testing.T) *lockstest.Fixture {
		path := filepath.Join(t.TempDir(), "locks.db")
		db := openLockDB(t, path)
		clock := newStoppedClock()
		ls := db
		ls.clock = clock.ms
		return &lockstest.Fixture{
			Store: ls,
			Clock: clock,
			Reopen: func(t *testing.T) locks.Store {
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db = openLockDB(t, path)
				ls = db
				ls.clock = clock.ms
				return ls
			},
			SetFence: func(t *testing.T, v int64) {
				if _, err := db.DB().Exec(`UPDATE lock_fence SET floor = ?`, v); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}

// TestLockStoreRealClock runs on the database's own clock: leases are
// written in its milliseconds and end by it.
func TestLockStoreRealClock(t *testing.T) {
	db := openLockDB(t, filepath.Join(t.TempDir(), "locks.db"))
	s := db
	ctx := t.Context()
	if _, ok, err := s.Acquire(ctx, "long", "a", time.Hour); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	var left int64
	if err := db.DB().QueryRow(`SELECT expires_at - CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER) FROM locks WHERE key = ?`,
		[]byte("long")).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left <= 0 || left > time.Hour.Milliseconds() {
		t.Fatalf("lease ends in %d ms by the database's clock, want within the hour", left)
	}
	if _, ok, err := s.Acquire(ctx, "long", "b", time.Hour); err != nil || ok {
		t.Fatalf("second Acquire: %v, %v; want refused", ok, err)
	}
	lockstest.ShortLeasesEnd(t, s, nil)
}

// TestLockSurvivesReopen: a lease lives in the file, not in the process.
func TestLockSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	db := openLockDB(t, path)
	ctx := t.Context()
	fence, ok, err := db.Acquire(ctx, "k", "a", time.Hour)
	if err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := openLockDB(t, path)
	if _, ok, err := s.Acquire(ctx, "k", "b", time.Hour); err != nil || ok {
		t.Fatalf("Acquire of a key held before the restart: %v, %v; want refused", ok, err)
	}
	if ok, err := s.Renew(ctx, "k", "a", time.Hour); err != nil || !ok {
		t.Fatalf("Renew by the holder after the restart: %v, %v", ok, err)
	}
	if ok, err := s.Release(ctx, "k", "a"); err != nil || !ok {
		t.Fatalf("Release by the holder after the restart: %v, %v", ok, err)
	}
	if f, ok, err := s.Acquire(ctx, "k", "b", time.Hour); err != nil || !ok || f <= fence {
		t.Fatalf("Acquire after release: fence %d, %v, %v; want > %d", f, ok, err, fence)
	}
}

func TestLockSweep(t *testing.T) {
	db := openLockDB(t, filepath.Join(t.TempDir(), "locks.db"))
	clock := newStoppedClock()
	s := db
	s.clock = clock.ms
	ctx := t.Context()
	var lockFences, slotFences [10]int64
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		// Fences above the floor: a key taken a few times, released once
		// (its row stays, free), then left to expire.
		for j := range i + 1 {
			f, ok, err := s.Acquire(ctx, key, fmt.Sprintf("o%d", j), time.Millisecond)
			if err != nil || !ok {
				t.Fatalf("Acquire: %v, %v", ok, err)
			}
			lockFences[i] = f
			if j < i {
				if ok, err := s.Release(ctx, key, fmt.Sprintf("o%d", j)); err != nil || !ok {
					t.Fatalf("Release: %v, %v", ok, err)
				}
			}
		}
		f, ok, err := s.AcquireSlot(ctx, key, "dead", 3, time.Millisecond)
		if err != nil || !ok {
			t.Fatalf("AcquireSlot: %v, %v", ok, err)
		}
		slotFences[i] = f
	}
	if _, ok, err := s.Acquire(ctx, "live", "a", time.Hour); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	clock.Advance(time.Millisecond)
	count := func() (n int) {
		t.Helper()
		if err := db.DB().QueryRow(`SELECT (SELECT COUNT(*) FROM locks) + (SELECT COUNT(*) FROM lock_slots)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 21 {
		t.Fatalf("%d rows before the sweep, want 21", n)
	}
	// The sweep runs inside the acquisition that completes a round.
	s.acquisitions.Store(sweepEvery - 1)
	if _, ok, err := s.Acquire(ctx, "next", "a", time.Hour); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d rows after the sweep, want the 2 live ones", n)
	}
	// The swept rows' fences live on in the floor.
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		if f, ok, err := s.Acquire(ctx, key, "again", time.Hour); err != nil || !ok || f <= lockFences[i] {
			t.Fatalf("Acquire(%s) after the sweep: fence %d, %v, %v; want > %d", key, f, ok, err, lockFences[i])
		}
		if f, ok, err := s.AcquireSlot(ctx, key, "again", 3, time.Hour); err != nil || !ok || f <= slotFences[i] {
			t.Fatalf("AcquireSlot(%s) after the sweep: fence %d, %v, %v; want > %d", key, f, ok, err, slotFences[i])
		}
	}
}

// TestLockEngineAcrossProcesses opens the file twice: two write connections,
// as two processes would have. Their engines meet only in the database.
func TestLockEngineAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	lockstest.EnginesExclude(t, func(t *testing.T) locks.Store { return openLockDB(t, path) })
}

// BenchmarkLockSQLite compares an uncontended Hold of a no-op fn on the
// SQLite lock store with its floor in the same run: one bare INSERT ... ON
// CONFLICT DO NOTHING and one DELETE on a plain table of the same shape
// (no trigger, no fence), each its own autocommit statement as the lock
// store's are. Both synchronous modes.
func BenchmarkLockSQLite(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run("sync="+sync, func(b *testing.B) {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "bench.db")+
				"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous("+sync+")")
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			s, err := New(context.Background(), db)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchLockSQLite(b, s)
		})
	}
}

func benchLockSQLite(b *testing.B, s *Store) {
	ctx := context.Background()
	db := s.DB()
	if _, err := db.Exec(`CREATE TABLE bench_floor (key BLOB PRIMARY KEY, owner TEXT NOT NULL,
		fence INTEGER NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID`); err != nil {
		b.Fatal(err)
	}
	key := []byte("k")
	b.Run("floor=INSERT+DELETE", func(b *testing.B) {
		for b.Loop() {
			if _, err := db.ExecContext(ctx, `INSERT INTO bench_floor (key, owner, fence, expires_at) VALUES (?, ?, 1, 0)
				ON CONFLICT (key) DO NOTHING`, key, "owner"); err != nil {
				b.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `DELETE FROM bench_floor WHERE key = ?`, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor=INSERT+DELETE/prepared", func(b *testing.B) {
		ins, err := db.Prepare(`INSERT INTO bench_floor (key, owner, fence, expires_at) VALUES (?, ?, 1, 0)
				ON CONFLICT (key) DO NOTHING`)
		if err != nil {
			b.Fatal(err)
		}
		defer ins.Close()
		del, err := db.Prepare(`DELETE FROM bench_floor WHERE key = ?`)
		if err != nil {
			b.Fatal(err)
		}
		defer del.Close()
		for b.Loop() {
			if _, err := ins.ExecContext(ctx, key, "owner"); err != nil {
				b.Fatal(err)
			}
			if _, err := del.ExecContext(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	ls := s
	b.Run("store/Acquire+Release", func(b *testing.B) {
		for b.Loop() {
			if _, ok, err := ls.Acquire(ctx, "k", "owner", time.Minute); !ok || err != nil {
				b.Fatal(ok, err)
			}
			if ok, err := ls.Release(ctx, "k", "owner"); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	e := locks.New(ls)
	defer e.Close()
	noop := func(context.Context, *locks.Lease) error { return nil }
	b.Run("Hold", func(b *testing.B) {
		for b.Loop() {
			if err := e.Hold(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Semaphore", func(b *testing.B) {
		sem := e.Semaphore(4)
		for b.Loop() {
			if err := sem.Hold(ctx, "k", noop); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLockSQLiteHandoff: the time from one holder's end to the next
// holder running, with 8 waiters queued in this process, as ns/handoff.
func BenchmarkLockSQLiteHandoff(b *testing.B) {
	s := openLockDB(b, filepath.Join(b.TempDir(), "bench.db"))
	e := locks.New(s)
	defer e.Close()
	var (
		remaining atomic.Int64
		ended     time.Time // only inside the section
		previous  = -1
		total     time.Duration
		count     int64
		wg        sync.WaitGroup
	)
	remaining.Store(int64(b.N))
	b.ResetTimer()
	for id := range 9 {
		wg.Go(func() {
			for remaining.Add(-1) >= 0 {
				err := e.Hold(context.Background(), "k", func(context.Context, *locks.Lease) error {
					now := time.Now()
					if previous != id && previous >= 0 {
						total += now.Sub(ended)
						count++
					}
					previous = id
					ended = time.Now()
					return nil
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if count > 0 {
		b.ReportMetric(float64(total.Nanoseconds())/float64(count), "ns/handoff")
	}
	b.ReportMetric(float64(count)/float64(b.N), "handoffs/op")
}

// TestLockSlotRowsReused: a semaphore key keeps about as many rows as it
// ever had holders at once, not one per acquisition.
func TestLockSlotRowsReused(t *testing.T) {
	db := openLockDB(t, filepath.Join(t.TempDir(), "locks.db"))
	s := db
	ctx := t.Context()
	var last int64
	for i := range 50 {
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		for _, o := range []string{a, b} {
			f, ok, err := s.AcquireSlot(ctx, "gen", o, 4, time.Hour)
			if err != nil || !ok || f <= last {
				t.Fatalf("AcquireSlot: fence %d, %v, %v; want > %d", f, ok, err, last)
			}
			last = f
		}
		for _, o := range []string{a, b} {
			if ok, err := s.ReleaseSlot(ctx, "gen", o); err != nil || !ok {
				t.Fatalf("ReleaseSlot: %v, %v", ok, err)
			}
		}
	}
	var n int
	if err := db.DB().QueryRow(`SELECT COUNT(*) FROM lock_slots`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d slot rows after 100 acquisitions two at a time, want 2", n)
	}
}
