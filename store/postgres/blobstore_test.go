package postgres

import (
	"bytes"
	"context"
	"testing"
	"time"

	"studio/blob"
	"studio/blob/blobtest"
	"studio/store/postgres/pgtest"
)

func openBlobs(t *testing.T) (*BlobStore, *Store) {
	t.Helper()
	_, schema := pgtest.Schema(t)
	db := openLockDB(t, pgtest.URL(t), schema)
	return NewBlobStore(db), db
}

func countBlobs(t *testing.T, db *Store) int {
	t.Helper()
	var n int
	if err := db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM blobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBlobSweepCounts: the blobs table's sweep reads only the rows past
// the age, so of what it keeps it counts the old named rows, not the
// recent ones. The conformance suite (TestBlobConformance) checks what it
// removes and keeps.
func TestBlobSweepCounts(t *testing.T) {
	t.Parallel()
	s, _ := openBlobs(t)
	clock := &blobtest.Clock{}
	s.now = clock.Now
	ctx := context.Background()
	put := func(b string) string {
		t.Helper()
		info, err := s.Put(ctx, bytes.NewReader([]byte(b)))
		if err != nil {
			t.Fatal(err)
		}
		return info.SHA256
	}
	named := put("named")
	put("unnamed")
	put("reused")
	clock.Advance(2 * time.Hour)
	put("reused") // touched now: young again
	put("recent")
	inUse := func(_ context.Context, sha string) (bool, error) { return sha == named, nil }
	res, err := s.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour, InUse: inUse})
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed != 1 || res.Kept != 1 {
		t.Fatalf("sweep = %+v, want 1 removed (unnamed), 1 kept (named)", res)
	}
}
