package postgres

import (
	"context"
	"testing"

	"studio/blob/blobtest"
	"studio/store/postgres/pgtest"
)

// TestBlobConformance holds the blobs table to the contract every blob
// store keeps.
func TestBlobConformance(t *testing.T) {
	t.Parallel()
	blobtest.Run(t, func(t *testing.T) blobtest.Backend {
		s, db := openBlobs(t)
		twin := NewBlobStore(openLockDB(t, pgtest.URL(t), db.Schema()))
		clock := &blobtest.Clock{}
		s.now, twin.now = clock.Now, clock.Now
		return blobtest.Backend{
			Store: s, Twin: twin, Clock: clock,
			Count: func(t *testing.T) int { return countBlobs(t, db) },
			Tamper: func(t *testing.T, sha string, data []byte) {
				if _, err := db.Pool().Exec(context.Background(), `UPDATE blobs SET data = $2 WHERE sha256 = $1`, sha, data); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}
