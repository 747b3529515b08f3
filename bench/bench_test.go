package bench_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"studio/bench"
	"studio/locks"
	"studio/locks/sqlitelock"
	"studio/store/sqlite"
)

// TestRunSQLite runs the operations that need no HTTP server straight
// through the package, on a SQLite store and its floors: every result has
// its name, its samples and a floor where the operation has one, and each
// is handed to the callback in order.
func TestRunSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "bench.db"), Synchronous: sqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ops, err := bench.Select("commit_12,replay,storm,drain_1,lock_hold_db")
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	var seen []string
	cfg := bench.Config{
		Store: s, Floors: sqlite.NewBenchFloors(s), Dir: t.TempDir(), MaxBatchTasks: 600,
		LockStore:   func() (locks.Store, error) { return locks.NewMemoryStore(), nil },
		DBLockStore: func() (locks.Store, error) { return sqlitelock.New(ctx, s.DB()) },
		N:           3, Tasks: 12, Progress: &progress,
	}
	results, err := bench.Run(ctx, cfg, ops, func(op bench.Op, r *bench.Result) error {
		seen = append(seen, op.Name+"="+r.Op)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"commit_12", "replay", "storm_64", "drain_1", "lock_hold_db"}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d", len(results), len(want))
	}
	for i, r := range results {
		if r.Op != want[i] || seen[i] != want[i]+"="+want[i] {
			t.Errorf("result %d: %q (callback %q), want %q", i, r.Op, seen[i], want[i])
		}
		if r.MedianUS <= 0 || r.P99US < r.MedianUS {
			t.Errorf("%s: median %v, p99 %v", r.Op, r.MedianUS, r.P99US)
		}
		hasFloor := r.Op != "storm_64"
		if (r.Ratio != nil) != hasFloor || (r.FloorMedianUS != nil) != hasFloor {
			t.Errorf("%s: floor %v, ratio %v; want a floor: %v", r.Op, r.FloorMedianUS, r.Ratio, hasFloor)
		}
		if !strings.Contains(progress.String(), r.Op+": median") {
			t.Errorf("no progress line for %s:\n%s", r.Op, progress.String())
		}
	}
	if p := results[2].PlansPerRound; p == nil || *p != 1 {
		t.Errorf("storm_64: plans per round %v, want 1", p)
	}
	var table bytes.Buffer
	bench.PrintTable(&table, ops, results)
	rows := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(rows) != len(want)+1 || !strings.HasPrefix(rows[0], "op ") || !strings.HasPrefix(rows[3], "storm_64 ") {
		t.Errorf("table:\n%s", table.String())
	}
}

// TestSelect: names, prefixes, the documented order, and an unknown name.
func TestSelect(t *testing.T) {
	t.Parallel()
	ops, err := bench.Select("lock_hold, commit_600 ,replay")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, op := range ops {
		names = append(names, op.Name)
	}
	if got := strings.Join(names, ","); got != "commit_600,replay,lock_hold_memory,lock_hold_db,lock_hold_redis" {
		t.Errorf("Select: %s", got)
	}
	if _, err := bench.Select("commit,nope"); err == nil || !strings.Contains(err.Error(), `no operation "nope"`) {
		t.Errorf("unknown op: %v", err)
	}
	if _, err := bench.Run(context.Background(), bench.Config{}, ops, nil); err == nil {
		t.Error("Run without a store: no error")
	}
}
