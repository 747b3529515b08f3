package sqlitelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"studio/locks"
	"studio/locks/lockstest"
)

// TestOpensStudioDatabase: a file whose lock tables studio's migration
// 0002_locks made (read from the repository, as it ran), with a lease and
// a semaphore slot taken before slot_limit existed, opens: the lease is
// still held, the old slot counts without a limit, and the store passes
// the conformance suite there.
func TestOpensStudioDatabase(t *testing.T) {
	ddl, err := os.ReadFile(filepath.Join("..", "..", "migrations", "sqlite", "0002_locks.sql"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "studio.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(string(ddl)); err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Hour).UnixMilli()
	if _, err := db.Exec(`INSERT INTO locks VALUES (?, 'old', 7, ?)`, []byte("k"), far); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO lock_slots VALUES (?, 0, 'old', 8, ?)`, []byte("gen"), far); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if _, ok, err := s.Acquire(ctx, "k", "new", time.Hour); err != nil || ok {
		t.Fatalf("Acquire of a key held before: %v, %v; want refused", ok, err)
	}
	if _, ok, err := s.AcquireSlot(ctx, "gen", "new", 1, time.Hour); err != nil || ok {
		t.Fatalf("AcquireSlot(limit 1) beside an old slot: %v, %v; want full, not a conflict", ok, err)
	}
	if f, ok, err := s.AcquireSlot(ctx, "gen", "new", 2, time.Hour); err != nil || !ok || f <= 8 {
		t.Fatalf("AcquireSlot(limit 2) beside an old slot: %d, %v, %v", f, ok, err)
	}
	if _, _, err := s.AcquireSlot(ctx, "gen", "other", 3, time.Hour); !errors.Is(err, locks.ErrLimitConflict) {
		t.Fatalf("AcquireSlot(limit 3) beside a slot of limit 2: %v", err)
	}
	// Opening again changes nothing.
	s2, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()

	lockstest.Run(t, func(t *testing.T) *lockstest.Fixture {
		p := filepath.Join(t.TempDir(), "studio.db")
		db, err := sql.Open("sqlite", "file:"+p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(ddl)); err != nil {
			t.Fatal(err)
		}
		db.Close()
		ls := openLockDB(t, p)
		clock := newStoppedClock()
		ls.clock = clock.ms
		return &lockstest.Fixture{Store: ls, Clock: clock}
	})
}

// TestStandaloneDependencies: a program that wants locks imports package
// locks and one store package, and with them nothing else of studio.
func TestStandaloneDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command on PATH to list dependencies")
	}
	out, err := exec.CommandContext(t.Context(), goBin, "list", "-deps",
		"studio/locks", "studio/locks/sqlitelock", "studio/locks/pglock", "studio/locks/redislock").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var ours []string
	for _, p := range strings.Fields(string(out)) {
		if p == "studio" || strings.HasPrefix(p, "studio/") {
			ours = append(ours, p)
		}
	}
	slices.Sort(ours)
	want := []string{"studio/locks", "studio/locks/pglock", "studio/locks/pglock/pglisten", "studio/locks/redislock", "studio/locks/sqlitelock"}
	if strings.Join(ours, " ") != strings.Join(want, " ") {
		t.Fatalf("studio packages in the dependencies: %v, want only %v", ours, want)
	}
}

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "sqlitelock")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	ls, err := Open(ctx, filepath.Join(dir, "locks.db")) // every process opening this file shares its locks
	if err != nil {
		panic(err)
	}
	defer ls.Close()
	e := locks.New(ls)
	defer e.Close()

	reports := e.Lock("reports", locks.TTL(10*time.Second))
	_ = reports.Hold(ctx, "2024-06", func(ctx context.Context, l *locks.Lease) error {
		info, err := reports.Inspect(ctx, "2024-06")
		if err != nil {
			return err
		}
		fmt.Println("held:", info.Held, "fence matches:", info.Holders[0].Fence == l.Fence(), "lease ends within 10 s:", info.Holders[0].Left <= 10*time.Second)
		return nil
	})
	// Output:
	// held: true fence matches: true lease ends within 10 s: true
}

// TestCloseCancelsBusyAcquire: another connection holds the file's write
// lock, so the store's acquisition waits in SQLite's busy handler (up to
// BusyTimeout, 10 s); Close cancels it and returns, and the hold answers
// ErrClosed.
func TestCloseCancelsBusyAcquire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	ls := openLockDB(t, path)
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(context.Background(), `ROLLBACK`)
	asking := make(chan struct{})
	e := locks.New(askSignal{ls, asking})
	done := make(chan error, 1)
	go func() {
		done <- e.Hold(context.Background(), "k", func(context.Context, *locks.Lease) error {
			t.Error("fn ran while another connection held the write lock")
			return nil
		})
	}()
	<-asking
	// The statement is on its way; SQLite's busy handler has no hook to
	// say it is waiting there, so give it time to get there: were it not
	// there yet, Close would cancel it earlier and the test pass without
	// proving anything, never fail wrongly.
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	e.Close()
	took := time.Since(start)
	if err := <-done; !errors.Is(err, locks.ErrClosed) {
		t.Fatalf("Hold: %v, want ErrClosed", err)
	}
	t.Logf("Close returned after %v with an acquisition waiting on a busy database", took)
	// ErrClosed alone does not show the statement was cancelled (Close
	// cancels the engine's context first): an uncancelled one holds Close
	// until SQLite's busy handler gives up, BusyTimeout after it began.
	if limit := BusyTimeout * time.Millisecond / 2; took >= limit {
		t.Fatalf("Close took %v: the busy acquisition was not cancelled (BusyTimeout %v)", took, BusyTimeout*time.Millisecond)
	}
}

// askSignal is a store that closes asking when an acquisition begins.
type askSignal struct {
	*Store
	asking chan struct{}
}

func (s askSignal) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	close(s.asking) // the test acquires once
	return s.Store.Acquire(ctx, key, owner, ttl)
}
