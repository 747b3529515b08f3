package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"studio/store/storetest"
	"studio/wake"
)

// TestWakesAcrossProcesses: a store hears within its watch interval that
// another store on the same file (another process) committed, as work of
// any id for its workers, publisher and streams; its own commits come
// with their ids and the watch adds nothing to them.
func TestWakesAcrossProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "studio.db")
	a := openStore(t, path)
	b := openStore(t, path)
	looked := make(chan struct{}, 1)
	b.onWatch = func() {
		select {
		case looked <- struct{}{}:
		default:
		}
	}
	sub := b.Wake().Subscribe(wake.All)
	defer sub.Close()
	<-looked // the first look: what comes after is new
	ctx := context.Background()
	if _, _, err := a.CreateIntent(ctx, storetest.Intent(t, "alice", "r1", "fp", 2)); err != nil {
		t.Fatal(err)
	}
	<-sub.C()
	p := sub.Take(time.Now())
	if _, all := p.IDs(wake.Tasks); p.Due != wake.Tasks|wake.Items|wake.Changed || !all {
		t.Fatalf("another process's commit: due %b (any id %v), want tasks, items and changes of any id", p.Due, all)
	}
	in := storetest.Intent(t, "alice", "r2", "fp", 1)
	if _, _, err := b.CreateIntent(ctx, in); err != nil {
		t.Fatal(err)
	}
	// Two looks after its own commit: had the watch taken it for
	// another's, it would have published by then.
	<-looked
	<-looked
	<-looked
	p = sub.Take(time.Now())
	if ids, all := p.IDs(wake.Tasks); p.Due != wake.Tasks || all || !slices.Equal(ids, []string{in.Batch.ID}) {
		t.Fatalf("own commit: due %b, ids %v (any %v); want tasks of %s only", p.Due, ids, all, in.Batch.ID)
	}
}

// openStore opens a store on path, closed when the test ends.
func openStore(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
