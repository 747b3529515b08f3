package sqlite

import (
	"context"
	"fmt"
)

// Disk space. A file made by this package is in auto_vacuum=INCREMENTAL
// mode from its first page (Open sets it before the first table): the
// pages a deletion frees stay in the file, on its free list, until Reclaim
// gives them back to the filesystem. A file made before that mode was set
// keeps auto_vacuum=NONE until Vacuum rewrites it once (`studio vacuum`).
//
// These run PRAGMAs and VACUUM, which are no transactions (VACUUM cannot
// run inside one), on the write pool's one connection through database/sql.

// incrementalIfNew sets auto_vacuum=INCREMENTAL on a file that has no
// table yet, where the VACUUM it needs rewrites one page. (Not in the DSN: a
// pragma there runs at every connection's open, and on a file another
// process is writing it would wait out busy_timeout, whatever the
// caller's context.)
func (s *Store) incrementalIfNew(ctx context.Context) error {
	var tables int64
	if err := s.writeDB.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema`).Scan(&tables); err != nil {
		return fmt.Errorf("open sqlite: %w", err)
	}
	if tables > 0 {
		return nil
	}
	// The file has a page already (journal_mode=WAL wrote its header):
	// the mode takes with a VACUUM, of that one page.
	for _, q := range []string{`PRAGMA auto_vacuum = INCREMENTAL`, `VACUUM`} {
		if _, err := s.writeDB.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("open sqlite: auto_vacuum: %w", err)
		}
	}
	return nil
}

// reclaimChunk is how many free pages one step of Reclaim gives back: 4 MiB
// of 4 KiB pages, a few milliseconds of the write lock.
const reclaimChunk = 1024

// Reclaim gives the file's free pages back to the filesystem, reclaimChunk
// pages per step so that no step holds the write lock for long, and
// answers how many bytes went. On a file still in auto_vacuum=NONE it
// gives nothing back (Vacuum converts it).
func (s *Store) Reclaim(ctx context.Context) (int64, error) {
	mode, err := s.AutoVacuum(ctx)
	if err != nil || mode != "incremental" {
		return 0, err
	}
	before, err := s.freeBytes(ctx)
	if err != nil {
		return 0, err
	}
	for free := before; ; {
		if free == 0 {
			return before, s.checkpoint(ctx)
		}
		if _, err := s.writeDB.ExecContext(ctx, fmt.Sprintf(`PRAGMA incremental_vacuum(%d)`, reclaimChunk)); err != nil {
			return 0, fmt.Errorf("reclaim: %w", err)
		}
		after, err := s.freeBytes(ctx)
		if err != nil {
			return 0, err
		}
		if after >= free {
			return before - after, s.checkpoint(ctx) // nothing moved: another process holds what is left
		}
		free = after
	}
}

// checkpoint copies the WAL into the file without waiting for readers
// (PASSIVE): the file shrinks once the frames of a Reclaim are in it.
func (s *Store) checkpoint(ctx context.Context) error {
	if _, err := s.writeDB.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// freeBytes is the size of the file's free list.
func (s *Store) freeBytes(ctx context.Context) (int64, error) {
	var pages, size int64
	if err := s.writeDB.QueryRowContext(ctx, `SELECT freelist_count, page_size FROM pragma_freelist_count(), pragma_page_size()`).
		Scan(&pages, &size); err != nil {
		return 0, fmt.Errorf("free pages: %w", err)
	}
	return pages * size, nil
}

// AutoVacuum answers the file's auto_vacuum mode: none, full or
// incremental.
func (s *Store) AutoVacuum(ctx context.Context) (string, error) {
	var mode int64
	if err := s.writeDB.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return "", fmt.Errorf("auto_vacuum: %w", err)
	}
	return [...]string{"none", "full", "incremental"}[mode%3], nil
}

// Vacuum rewrites the whole file in auto_vacuum=INCREMENTAL mode: the
// one-time conversion of a file made before that mode, and a compaction
// that also gives back every free page. It holds the write lock for the
// whole rewrite (about a second per few hundred MB) and needs free disk
// space of the file's size; it answers the file's size before and after.
func (s *Store) Vacuum(ctx context.Context) (before, after int64, err error) {
	size := func() (int64, error) {
		var pages, pageSize int64
		if err := s.writeDB.QueryRowContext(ctx, `SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()`).
			Scan(&pages, &pageSize); err != nil {
			return 0, fmt.Errorf("vacuum: %w", err)
		}
		return pages * pageSize, nil
	}
	if before, err = size(); err != nil {
		return 0, 0, err
	}
	if _, err := s.writeDB.ExecContext(ctx, `PRAGMA auto_vacuum = INCREMENTAL`); err != nil {
		return 0, 0, fmt.Errorf("vacuum: %w", err)
	}
	if _, err := s.writeDB.ExecContext(ctx, `VACUUM`); err != nil {
		return 0, 0, fmt.Errorf("vacuum: %w", err)
	}
	if after, err = size(); err != nil {
		return 0, 0, err
	}
	return before, after, nil
}
