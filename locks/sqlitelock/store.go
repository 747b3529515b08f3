package sqlitelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"studio/locks"
)

// Store is the locks.Store of a SQLite database: leases in the tables
// locks, lock_slots and lock_fence, so that every process opening the same
// file shares them.
//
// Every method is one statement on the store's write connection, so it is
// atomic on its own: SQLite runs one writer at a time, in this process
// through the single write connection, across processes through the file
// lock (waiting up to busy_timeout). An acquisition checks the key, draws
// its fence and writes the lease in that one statement, one row written as
// by a bare INSERT: a released lock keeps its row and fence, and the next
// acquisition takes fence + 1 (migration 0002 tells how fences outlive the
// rows swept away: see the schema). Expiry is decided by the database's clock,
// unixepoch('subsec') in milliseconds, read inside the statement; TTLs are
// rounded up to whole milliseconds.
//
// Waiters in other processes are not notified: the engine polls (see
// locks.PollInterval).
type Store struct {
	db  *sql.DB
	own bool // Open made db: Close closes it

	// Prepared on first use: parsing these statements (and coding their
	// triggers) costs more than running them.
	mu    sync.Mutex
	stmts map[string]*sql.Stmt

	// clock replaces the database's clock when set (tests stop it with
	// this): milliseconds since the epoch.
	clock func() int64
	// acquisitions counts Acquire and AcquireSlot calls, to sweep expired
	// rows now and then.
	acquisitions atomic.Uint64
}

var _ locks.Store = (*Store)(nil)

// DB returns the database the store runs on.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the prepared statements, and the database if Open opened
// it.
func (s *Store) Close() error {
	s.mu.Lock()
	var errs []error
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	s.stmts = nil
	s.mu.Unlock()
	if s.own {
		errs = append(errs, s.db.Close())
	}
	return errors.Join(errs...)
}

// nowSQL is the statement's time in milliseconds: the bound parameter ?N
// when a test set a clock, else the database's clock (one value per
// statement: SQLite reads 'now' once per step).
func nowSQL(n int) string {
	return fmt.Sprintf("COALESCE(?%d, CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER))", n)
}

var (
	// A free key: a new row at floor + 1, or the key's row, free, takes
	// its own fence + 1. A held key: no row changes and none returns.
	acquireSQL = `INSERT INTO locks (key, owner, fence, expires_at)
VALUES (?1, ?2, (SELECT floor + 1 FROM lock_fence WHERE id = 1), ` + nowSQL(4) + ` + ?3)
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, fence = locks.fence + 1, expires_at = excluded.expires_at
WHERE locks.expires_at <= ` + nowSQL(4) + `
RETURNING fence`
	renewSQL = `UPDATE locks SET expires_at = ` + nowSQL(4) + ` + ?3
WHERE key = ?1 AND owner = ?2 AND expires_at > ` + nowSQL(4)
	// A release frees the row and keeps it, with its fence.
	releaseSQL = `UPDATE locks SET expires_at = 0
WHERE key = ?1 AND owner = ?2 AND expires_at > ` + nowSQL(4)

	// A free slot: the key's lowest free row, else a new row past the
	// highest. The live COUNT is the guard; the slot number only names
	// the row. Every subquery reads the key's rows through the primary
	// key (a key has about as many rows as it ever had holders at once).
	acquireSlotSQL = `INSERT INTO lock_slots (key, slot, owner, fence, expires_at, slot_limit)
SELECT ?1,
    COALESCE(
        (SELECT MIN(slot) FROM lock_slots WHERE key = ?1 AND expires_at <= ` + nowSQL(4) + `),
        (SELECT COALESCE(MAX(slot), -1) + 1 FROM lock_slots WHERE key = ?1)),
    ?2,
    MAX((SELECT floor FROM lock_fence WHERE id = 1),
        (SELECT COALESCE(MAX(fence), 0) FROM lock_slots WHERE key = ?1)) + 1,
    ` + nowSQL(4) + ` + ?3,
    ?5
WHERE (SELECT COUNT(*) FROM lock_slots WHERE key = ?1 AND expires_at > ` + nowSQL(4) + `) < ?5
  AND NOT EXISTS (SELECT 1 FROM lock_slots WHERE key = ?1 AND expires_at > ` + nowSQL(4) + ` AND slot_limit NOT IN (0, ?5))
ON CONFLICT (key, slot) DO UPDATE SET owner = excluded.owner, fence = excluded.fence, expires_at = excluded.expires_at,
    slot_limit = excluded.slot_limit
WHERE lock_slots.expires_at <= ` + nowSQL(4) + `
RETURNING fence`
	// A live slot taken under another limit (0: not recorded).
	conflictSQL = `SELECT slot_limit FROM lock_slots
WHERE key = ?1 AND expires_at > ` + nowSQL(2) + ` AND slot_limit NOT IN (0, ?3) LIMIT 1`
	renewSlotSQL = `UPDATE lock_slots SET expires_at = ` + nowSQL(4) + ` + ?3
WHERE key = ?1 AND owner = ?2 AND expires_at > ` + nowSQL(4)
	releaseSlotSQL = `UPDATE lock_slots SET expires_at = 0
WHERE key = ?1 AND owner = ?2 AND expires_at > ` + nowSQL(4)

	// One row at least: the statement's time, then each live lease (NULLs
	// when there is none).
	inspectSQL = `SELECT n.t, l.fence, l.expires_at, 0 FROM (SELECT ` + nowSQL(2) + ` AS t) n
LEFT JOIN locks l ON l.key = ?1 AND l.expires_at > n.t`
	inspectSlotsSQL = `SELECT n.t, l.fence, l.expires_at, COALESCE(l.slot_limit, 0) FROM (SELECT ` + nowSQL(2) + ` AS t) n
LEFT JOIN lock_slots l ON l.key = ?1 AND l.expires_at > n.t ORDER BY l.fence`

	// The triggers raise the floor to each deleted fence.
	sweepSQL = []string{
		`DELETE FROM locks WHERE key IN
    (SELECT key FROM locks WHERE expires_at <= ` + nowSQL(1) + ` LIMIT ` + sweepLimit + `)`,
		`DELETE FROM lock_slots WHERE (key, slot) IN
    (SELECT key, slot FROM lock_slots WHERE expires_at <= ` + nowSQL(1) + ` LIMIT ` + sweepLimit + `)`,
	}
)

// sweepEvery is how many acquisitions pass between two sweeps of free and
// expired rows; a sweep deletes up to sweepLimit rows of each table, more
// than the acquisitions between two sweeps can free, so the tables stay
// near the number of live leases.
const (
	sweepEvery = 1024
	sweepLimit = "2048"
)

// stmt returns the prepared form of query, preparing it once. A failed
// preparation is not kept: the next call tries again.
func (s *Store) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stmts[query]; st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if s.stmts == nil {
		s.stmts = make(map[string]*sql.Stmt)
	}
	s.stmts[query] = st
	return st, nil
}

// queryRow runs a prepared query that answers at most one row.
func (s *Store) queryRow(ctx context.Context, query string, dest any, args ...any) error {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return err
	}
	return st.QueryRowContext(ctx, args...).Scan(dest)
}

// exec runs a prepared statement and answers how many rows it changed.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// now is the bound value of the time parameter: nil for the database's
// clock.
func (s *Store) now() any {
	if s.clock != nil {
		return s.clock()
	}
	return nil
}

// Acquire implements locks.Store.
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	if err := s.maybeSweep(ctx); err != nil {
		return 0, false, err
	}
	var fence int64
	err := s.queryRow(ctx, acquireSQL, &fence, []byte(key), owner, locks.TTLMillis(ttl), s.now())
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("acquire lock: %w", interpretLock(err))
	}
	return fence, true, nil
}

// Renew implements locks.Store.
func (s *Store) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	return s.renew(ctx, "renew lock", renewSQL, key, owner, ttl)
}

// Release implements locks.Store.
func (s *Store) Release(ctx context.Context, key, owner string) (bool, error) {
	return s.release(ctx, "release lock", releaseSQL, key, owner)
}

// AcquireSlot implements locks.Store.
func (s *Store) AcquireSlot(ctx context.Context, key, owner string, limit int, ttl time.Duration) (int64, bool, error) {
	if err := locks.CheckLimit(limit); err != nil {
		return 0, false, fmt.Errorf("acquire slot: %w", err)
	}
	if err := s.maybeSweep(ctx); err != nil {
		return 0, false, err
	}
	var fence int64
	err := s.queryRow(ctx, acquireSlotSQL, &fence, []byte(key), owner, locks.TTLMillis(ttl), s.now(), limit)
	if errors.Is(err, sql.ErrNoRows) {
		// Full, or held under another limit: tell which. (If the other
		// limit's holders left meanwhile, it was full a moment ago.)
		var other int
		err := s.queryRow(ctx, conflictSQL, &other, []byte(key), s.now(), limit)
		if err == nil {
			return 0, false, locks.LimitConflict(key, other, limit)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, false, fmt.Errorf("acquire slot: %w", err)
		}
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("acquire slot: %w", interpretLock(err))
	}
	return fence, true, nil
}

// RenewSlot implements locks.Store.
func (s *Store) RenewSlot(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	return s.renew(ctx, "renew slot", renewSlotSQL, key, owner, ttl)
}

// ReleaseSlot implements locks.Store.
func (s *Store) ReleaseSlot(ctx context.Context, key, owner string) (bool, error) {
	return s.release(ctx, "release slot", releaseSlotSQL, key, owner)
}

func (s *Store) renew(ctx context.Context, op, query, key, owner string, ttl time.Duration) (bool, error) {
	n, err := s.exec(ctx, query, []byte(key), owner, locks.TTLMillis(ttl), s.now())
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, interpretLock(err))
	}
	return n == 1, nil
}

func (s *Store) release(ctx context.Context, op, query, key, owner string) (bool, error) {
	n, err := s.exec(ctx, query, []byte(key), owner, nil, s.now())
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, interpretLock(err))
	}
	return n == 1, nil
}

// Inspect implements locks.Store.
func (s *Store) Inspect(ctx context.Context, key string) (locks.KeyState, error) {
	st, err := s.inspect(ctx, inspectSQL, key)
	if err != nil {
		return st, fmt.Errorf("inspect lock: %w", err)
	}
	return st, nil
}

// InspectSlots implements locks.Store.
func (s *Store) InspectSlots(ctx context.Context, key string) (locks.KeyState, error) {
	st, err := s.inspect(ctx, inspectSlotsSQL, key)
	if err != nil {
		return st, fmt.Errorf("inspect slots: %w", err)
	}
	return st, nil
}

func (s *Store) inspect(ctx context.Context, query, key string) (locks.KeyState, error) {
	var st locks.KeyState
	q, err := s.stmt(ctx, query)
	if err != nil {
		return st, err
	}
	rows, err := q.QueryContext(ctx, []byte(key), s.now())
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			now            int64
			fence, expires sql.NullInt64
			limit          int
		)
		if err := rows.Scan(&now, &fence, &expires, &limit); err != nil {
			return st, err
		}
		st.Now = time.UnixMilli(now)
		if fence.Valid {
			exp := time.UnixMilli(expires.Int64)
			st.Holders = append(st.Holders, locks.Holder{Fence: fence.Int64, Expires: exp, Left: exp.Sub(st.Now)})
			st.Limit = max(st.Limit, limit)
		}
	}
	return st, rows.Err()
}

// maybeSweep sweeps once every sweepEvery acquisitions. A free or
// expired row is nobody's lease; deleting it only keeps the table small.
func (s *Store) maybeSweep(ctx context.Context) error {
	if s.acquisitions.Add(1)%sweepEvery != 0 {
		return nil
	}
	return s.sweep(ctx)
}

func (s *Store) sweep(ctx context.Context) error {
	for _, q := range sweepSQL {
		if _, err := s.exec(ctx, q, s.now()); err != nil {
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
