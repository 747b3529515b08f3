package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/blob"
)

// BlobStore keeps asset bytes in the database (the blobs table of
// migration 0101), for studio processes that share a database but no disk.
//
// Put commits the bytes before it returns, so the asset row its caller
// commits next never names missing bytes ("files first, rows after", with
// a row for a file). Bytes already stored are not sent again: Put first
// touches the row, and only when there is none sends the bytes, with an
// upsert that two racing Puts of the same bytes both survive. A sweep
// decides each old row under its row lock, so a Put that touches the row
// either comes first (the sweep then sees it recent and keeps it) or waits
// and, finding it gone, writes it again.
type BlobStore struct {
	s *Store
	// now is the clock of touched_at; the database's when nil.
	now func() time.Time
}

var _ blob.Store = (*BlobStore)(nil)

// NewBlobStore returns the blob store of s, on s's pool.
func NewBlobStore(s *Store) *BlobStore { return &BlobStore{s: s} }

// stamp is the bound value of the time parameter: nil for the database's
// clock.
func (b *BlobStore) stamp() *time.Time {
	if b.now != nil {
		t := b.now()
		return &t
	}
	return nil
}

// Put stores r's bytes, read into memory (assets are bounded: the API
// refuses uploads over 20 MiB).
func (b *BlobStore) Put(ctx context.Context, r io.Reader) (blob.Info, error) {
	data, err := blob.ReadAll(r)
	if err != nil {
		return blob.Info{}, fmt.Errorf("put blob: read: %w", err)
	}
	sum := sha256.Sum256(data)
	info := blob.Info{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
	tag, err := b.s.pool.Exec(ctx, `UPDATE blobs SET touched_at = COALESCE($2::timestamptz, clock_timestamp())
		WHERE sha256 = $1`, info.SHA256, b.stamp())
	if err != nil {
		return blob.Info{}, fmt.Errorf("put blob: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return info, nil
	}
	if _, err := b.s.pool.Exec(ctx, `INSERT INTO blobs (sha256, size, data, touched_at)
		VALUES ($1, $2, $3, COALESCE($4::timestamptz, clock_timestamp()))
		ON CONFLICT (sha256) DO UPDATE SET touched_at = excluded.touched_at`,
		info.SHA256, info.Size, data, b.stamp()); err != nil {
		return blob.Info{}, fmt.Errorf("put blob: %w", err)
	}
	return info, nil
}

// Open reads the bytes of sha256, whole, in one statement, and verifies
// them: the reader holds them in memory and cannot change under its
// caller.
func (b *BlobStore) Open(ctx context.Context, sha string) (io.ReadSeekCloser, error) {
	if err := blob.CheckSHA256(sha); err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	var data []byte
	err := b.s.pool.QueryRow(ctx, `SELECT data FROM blobs WHERE sha256 = $1`, sha).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("open blob %s: %w", sha, blob.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	if err := blob.Verify(sha, data); err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	return bytesReader{bytes.NewReader(data)}, nil
}

// bytesReader is a bytes.Reader with a Close that does nothing.
type bytesReader struct{ *bytes.Reader }

// Close implements io.Closer.
func (bytesReader) Close() error { return nil }

// Exists says whether the bytes of sha256 are stored.
func (b *BlobStore) Exists(ctx context.Context, sha string) (bool, error) {
	if err := blob.CheckSHA256(sha); err != nil {
		return false, fmt.Errorf("blob exists: %w", err)
	}
	var in bool
	if err := b.s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM blobs WHERE sha256 = $1)`, sha).Scan(&in); err != nil {
		return false, fmt.Errorf("blob exists: %w", err)
	}
	return in, nil
}

// Sweep removes rows no asset names and nobody wrote or reused within
// p.OlderThan. Each candidate is decided in its own transaction under its
// row lock: still old, named by no record (p.InUse), deleted.
func (b *BlobStore) Sweep(ctx context.Context, p blob.SweepParams) (blob.SweepResult, error) {
	var res blob.SweepResult
	if p.InUse == nil {
		return res, errors.New("sweep blobs: no InUse")
	}
	after := ""
	for {
		rows, err := b.s.pool.Query(ctx, `SELECT sha256 FROM blobs
			WHERE touched_at <= COALESCE($1::timestamptz, clock_timestamp()) - $2::interval AND sha256 > $3
			ORDER BY sha256 LIMIT 500`, b.stamp(), p.OlderThan, after)
		if err != nil {
			return res, fmt.Errorf("sweep blobs: %w", err)
		}
		shas, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return res, fmt.Errorf("sweep blobs: %w", err)
		}
		if len(shas) == 0 {
			return res, nil
		}
		for _, sha := range shas {
			removed, err := b.sweepOne(ctx, p, sha)
			if err != nil {
				return res, fmt.Errorf("sweep blob %s: %w", sha, err)
			}
			if removed {
				res.Removed++
			} else {
				res.Kept++
			}
		}
		after = shas[len(shas)-1]
	}
}

func (b *BlobStore) sweepOne(ctx context.Context, p blob.SweepParams, sha string) (bool, error) {
	removed := false
	err := pgx.BeginFunc(ctx, b.s.pool, func(tx pgx.Tx) error {
		var old bool
		err := tx.QueryRow(ctx, `SELECT touched_at <= COALESCE($2::timestamptz, clock_timestamp()) - $3::interval
			FROM blobs WHERE sha256 = $1 FOR UPDATE`, sha, b.stamp(), p.OlderThan).Scan(&old)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !old) {
			return nil // gone, or reused since the listing
		}
		if err != nil {
			return err
		}
		in, err := p.InUse(ctx, sha)
		if err != nil || in {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM blobs WHERE sha256 = $1`, sha); err != nil {
			return err
		}
		removed = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return removed, nil
}

// Walk calls fn with every blob in the table, in pages of 500.
func (b *BlobStore) Walk(ctx context.Context, fn func(sha256 string) error) error {
	after := ""
	for {
		rows, err := b.s.pool.Query(ctx, `SELECT sha256 FROM blobs WHERE sha256 > $1 ORDER BY sha256 LIMIT 500`, after)
		if err != nil {
			return fmt.Errorf("walk blobs: %w", err)
		}
		shas, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("walk blobs: %w", err)
		}
		for _, sha := range shas {
			if err := fn(sha); err != nil {
				return err
			}
		}
		if len(shas) < 500 {
			return nil
		}
		after = shas[len(shas)-1]
	}
}
