package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"studio/locks"
)

// LockStore is the locks.Store of a SQLite database: leases in the tables
// of migration 0002 (locks, lock_slots, lock_fence), so that every process
// opening the same file shares them.
//
// Every method is one statement on the store's write connection, so it is
// atomic on its own: SQLite runs one writer at a time, in this process
// through the single write connection, across processes through the file
// lock (waiting up to busy_timeout). An acquisition checks the key, draws
// its fence from lock_fence and writes both in that one statement (the
// fence goes back to the counter by trigger). Expiry is decided by the
// database's clock, unixepoch('subsec') in milliseconds, read inside the
// statement; TTLs are rounded up to whole milliseconds.
//
// Waiters in other processes are not notified: the engine polls (see
// locks.PollInterval).
type LockStore struct {
	db *sql.DB
	// clock replaces the database's clock when set (tests stop it with
	// this): milliseconds since the epoch.
	clock func() int64
	// acquisitions counts Acquire and AcquireSlot calls, to sweep expired
	// rows now and then.
	acquisitions atomic.Uint64
}

// NewLockStore returns the lock store of s, on s's write connection.
func NewLockStore(s *Store) *LockStore {
	return &LockStore{db: s.DB()}
}

var _ locks.Store = (*LockStore)(nil)

// nowSQL is the statement's time in milliseconds: the bound parameter ?N
// when a test set a clock, else the database's clock (one value per
// statement: SQLite reads 'now' once per step).
func nowSQL(n int) string {
	return fmt.Sprintf("COALESCE(?%d, CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER))", n)
}

var (
	acquireSQL = `INSERT INTO locks (key, owner, fence, expires_at)
VALUES (?1, ?2, (SELECT value + 1 FROM lock_fence WHERE id = 1), ` + nowSQL(4) + ` + ?3)
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, fence = excluded.fence, expires_at = excluded.expires_at
WHERE locks.expires_at <= ` + nowSQL(4) + `
RETURNING fence`
	renewSQL = `UPDATE locks SET expires_at = ` + nowSQL(4) + ` + ?3
WHERE key = ?1 AND owner = ?2 AND expires_at > ` + nowSQL(4)
	releaseSQL = `DELETE FROM locks WHERE key = ?1 AND owner = ?2
RETURNING expires_at > ` + nowSQL(3)

	acquireSlotSQL = `INSERT INTO lock_slots (key, owner, fence, expires_at)
SELECT ?1, ?2, (SELECT value + 1 FROM lock_fence WHERE id = 1), ` + nowSQL(4) + ` + ?3
WHERE (SELECT COUNT(*) FROM lock_slots WHERE key = ?1 AND expires_at > ` + nowSQL(4) + `) < ?5
RETURNING fence`
	renewSlotSQL = `UPDATE lock_slots SET expires_at = ` + nowSQL(4) + ` + ?3
WHERE key = ?1 AND owner = ?2 AND expires_at > ` + nowSQL(4)
	releaseSlotSQL = `DELETE FROM lock_slots WHERE key = ?1 AND owner = ?2
RETURNING expires_at > ` + nowSQL(3)

	sweepSQL = []string{
		`DELETE FROM locks WHERE key IN
    (SELECT key FROM locks WHERE expires_at <= ` + nowSQL(1) + ` LIMIT 256)`,
		`DELETE FROM lock_slots WHERE (key, owner) IN
    (SELECT key, owner FROM lock_slots WHERE expires_at <= ` + nowSQL(1) + ` LIMIT 256)`,
	}
)

// sweepEvery is how many acquisitions pass between two sweeps of expired
// rows left by holders that never released (their process died).
const sweepEvery = 1024

// now is the bound value of the time parameter: nil for the database's
// clock.
func (s *LockStore) now() any {
	if s.clock != nil {
		return s.clock()
	}
	return nil
}

// Acquire implements locks.Store.
func (s *LockStore) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	if err := s.maybeSweep(ctx); err != nil {
		return 0, false, err
	}
	var fence int64
	err := s.db.QueryRowContext(ctx, acquireSQL, []byte(key), owner, locks.TTLMillis(ttl), s.now()).Scan(&fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("acquire lock: %w", interpretLock(err))
	}
	return fence, true, nil
}

// Renew implements locks.Store.
func (s *LockStore) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	return s.renew(ctx, "renew lock", renewSQL, key, owner, ttl)
}

// Release implements locks.Store.
func (s *LockStore) Release(ctx context.Context, key, owner string) (bool, error) {
	return s.release(ctx, "release lock", releaseSQL, key, owner)
}

// AcquireSlot implements locks.Store.
func (s *LockStore) AcquireSlot(ctx context.Context, key, owner string, limit int, ttl time.Duration) (int64, bool, error) {
	if limit < 1 {
		return 0, false, fmt.Errorf("acquire slot: %w: limit %d", locks.ErrInvalid, limit)
	}
	if err := s.maybeSweep(ctx); err != nil {
		return 0, false, err
	}
	var fence int64
	err := s.db.QueryRowContext(ctx, acquireSlotSQL, []byte(key), owner, locks.TTLMillis(ttl), s.now(), limit).Scan(&fence)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("acquire slot: %w", interpretLock(err))
	}
	return fence, true, nil
}

// RenewSlot implements locks.Store.
func (s *LockStore) RenewSlot(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	return s.renew(ctx, "renew slot", renewSlotSQL, key, owner, ttl)
}

// ReleaseSlot implements locks.Store.
func (s *LockStore) ReleaseSlot(ctx context.Context, key, owner string) (bool, error) {
	return s.release(ctx, "release slot", releaseSlotSQL, key, owner)
}

func (s *LockStore) renew(ctx context.Context, op, query, key, owner string, ttl time.Duration) (bool, error) {
	res, err := s.db.ExecContext(ctx, query, []byte(key), owner, locks.TTLMillis(ttl), s.now())
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, interpretLock(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	return n == 1, nil
}

func (s *LockStore) release(ctx context.Context, op, query, key, owner string) (bool, error) {
	var live bool
	err := s.db.QueryRowContext(ctx, query, []byte(key), owner, s.now()).Scan(&live)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, interpretLock(err))
	}
	return live, nil
}

// maybeSweep deletes up to 256 expired rows of each table once every
// sweepEvery acquisitions. An expired row is free already; deleting it
// only keeps the tables small.
func (s *LockStore) maybeSweep(ctx context.Context) error {
	if s.acquisitions.Add(1)%sweepEvery != 0 {
		return nil
	}
	return s.sweep(ctx)
}

func (s *LockStore) sweep(ctx context.Context) error {
	for _, q := range sweepSQL {
		if _, err := s.db.ExecContext(ctx, q, s.now()); err != nil {
			return fmt.Errorf("sweep expired locks: %w", err)
		}
	}
	return nil
}

// interpretLock translates the driver's errors of the lock tables: a
// CHECK failure there is a fence past 2^53-1.
func interpretLock(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_CHECK {
		return fmt.Errorf("%w (%v)", locks.ErrFenceExhausted, err)
	}
	return err
}
