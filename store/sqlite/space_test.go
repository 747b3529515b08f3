package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"studio/store"
	"studio/store/storetest"
)

// TestReclaimGivesPagesBack: a new file is in auto_vacuum=INCREMENTAL
// mode, and after a prune Reclaim shrinks it.
func TestReclaimGivesPagesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "studio.db")
	s := open(t, path)
	if mode, err := s.AutoVacuum(ctx); err != nil || mode != "incremental" {
		t.Fatalf("a new file's auto_vacuum: %q, %v", mode, err)
	}
	for i := range 20 {
		in := storetest.Intent(t, "alice", fmt.Sprint("r", i), "fp", 200)
		if _, _, err := s.CreateIntent(ctx, in); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CancelBatch(ctx, "alice", in.Batch.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DB().ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	full := fileSize(t, s)
	if _, err := store.Prune(ctx, s, store.PruneParams{Before: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	freed, err := s.Reclaim(ctx)
	if err != nil || freed == 0 {
		t.Fatalf("Reclaim = %d, %v", freed, err)
	}
	if after := fileSize(t, s); after > full/2 {
		t.Fatalf("file %d bytes after the prune and Reclaim, %d before", after, full)
	}
}

// TestVacuumConvertsAnOldFile: a file made in auto_vacuum=NONE (as every
// file was before) gives nothing back until Vacuum converts it.
func TestVacuumConvertsAnOldFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "studio.db")
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`CREATE TABLE made_before (x INTEGER)`); err != nil { // auto_vacuum NONE is now fixed
		t.Fatal(err)
	}
	raw.Close()
	s := open(t, path)
	if mode, err := s.AutoVacuum(ctx); err != nil || mode != "none" {
		t.Fatalf("an old file's auto_vacuum: %q, %v", mode, err)
	}
	if n, err := s.Reclaim(ctx); err != nil || n != 0 {
		t.Fatalf("Reclaim on an old file = %d, %v", n, err)
	}
	if _, _, err := s.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if mode, err := s.AutoVacuum(ctx); err != nil || mode != "incremental" {
		t.Fatalf("after Vacuum: %q, %v", mode, err)
	}
}

func fileSize(t *testing.T, s interface{ Path() string }) int64 {
	t.Helper()
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
