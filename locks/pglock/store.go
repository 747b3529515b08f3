package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"studio/locks"
)

// Store is the locks.Store of a PostgreSQL database: leases in the tables
// locks and lock_slots with fences from the sequence lock_fence, so that
// every process using the same schema shares them.
//
// A lock is taken by one statement: INSERT ... ON CONFLICT (key) DO UPDATE
// ... WHERE the row has expired ... RETURNING fence. On a free key two
// racers both insert; the unique index makes the second wait for the first
// and then take the conflict path, where the WHERE is checked against the
// row the first wrote (live: nothing changes, no row comes back). On an
// expired key the conflict path locks the row and checks it, so exactly
// one racer takes it. The fence is nextval of one sequence. A sequence
// never goes back, but a statement draws its value before it reaches the
// key: a slow statement could take a key, freed since, with a value drawn
// before another holder's. So the statement is sent after a
// transaction-scoped advisory lock on the key, in the same round trip (an
// implicit transaction): the acquisitions of a key draw in the order they
// run, and each fence is larger than every fence the key had before.
// Renew and Release are single compare-and-set statements on the owner.
//
// A semaphore slot needs "count the live slots, then insert"; the same
// advisory lock (on the semaphore's key) makes it one step, since the
// insert's snapshot starts after the lock is held.
//
// Expiry is decided by the database's clock, clock_timestamp(), read once
// per statement (a test may fix it); TTLs keep microseconds, rounded up.
//
// A release that frees a live lease also sends a NOTIFY on Channel, in the
// same statement (delivered when it commits); the store's Subscribe keeps
// one connection LISTENing and passes each release of its schema to the
// engine, whose waiters ask at once.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	own    bool // Open made the pool: Close closes it
	notify bool

	listenCtx  context.Context // ends at Close
	stopListen context.CancelFunc
	listening  sync.WaitGroup
	subs       subscribers

	// clock replaces the database's clock when set: tests stop it.
	clock func() time.Time
	// acquisitions counts Acquire and AcquireSlot calls, to sweep expired
	// rows now and then.
	acquisitions atomic.Uint64
}

var (
	_ locks.Store    = (*Store)(nil)
	_ locks.Notifier = (*Store)(nil)
)

// nowSQL is the statement's time: the parameter $n when a test set a
// clock, else the database's clock, evaluated once (it sits in a FROM
// item).
func nowSQL(n int) string {
	return fmt.Sprintf("(SELECT COALESCE($%d::timestamptz, clock_timestamp()) AS t) AS now", n)
}

var (
	// The conflict path's WHERE reads "now" back from the row that would
	// have been inserted: excluded.expires_at - ttl.
	acquireSQL = `INSERT INTO locks AS l (key, owner, fence, expires_at)
SELECT $1, $2, nextval('lock_fence'), now.t + $3::interval FROM ` + nowSQL(4) + `
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, fence = excluded.fence, expires_at = excluded.expires_at
WHERE l.expires_at <= excluded.expires_at - $3::interval
RETURNING fence`
	renewSQL = `UPDATE locks SET expires_at = now.t + $3::interval FROM ` + nowSQL(4) + `
WHERE key = $1 AND owner = $2 AND expires_at > now.t`
	// $4 is the NOTIFY payload, or '' for none; n runs only because the
	// last line reads it.
	releaseSQL = `WITH d AS (DELETE FROM locks USING ` + nowSQL(3) + `
    WHERE key = $1 AND owner = $2 RETURNING expires_at > now.t AS live),
n AS (SELECT pg_notify('` + Channel + `', $4) FROM d WHERE d.live AND $4 <> '')
SELECT live, (SELECT count(*) FROM n) FROM d`

	keyLockSQL     = `SELECT pg_advisory_xact_lock($1)`
	acquireSlotSQL = `INSERT INTO lock_slots (key, owner, fence, expires_at, slot_limit)
SELECT $1, $2, nextval('lock_fence'), now.t + $3::interval, $5::integer FROM ` + nowSQL(4) + `
WHERE (SELECT count(*) FROM lock_slots s WHERE s.key = $1 AND s.expires_at > now.t) < $5::integer
  AND NOT EXISTS (SELECT 1 FROM lock_slots s WHERE s.key = $1 AND s.expires_at > now.t AND s.slot_limit NOT IN (0, $5::integer))
RETURNING fence`
	// A live slot taken under another limit (0: not recorded).
	conflictSQL = `SELECT s.slot_limit FROM lock_slots s, ` + nowSQL(2) + `
WHERE s.key = $1 AND s.expires_at > now.t AND s.slot_limit NOT IN (0, $3::integer) LIMIT 1`
	renewSlotSQL = `UPDATE lock_slots SET expires_at = now.t + $3::interval FROM ` + nowSQL(4) + `
WHERE key = $1 AND owner = $2 AND expires_at > now.t`
	releaseSlotSQL = `WITH d AS (DELETE FROM lock_slots USING ` + nowSQL(3) + `
    WHERE key = $1 AND owner = $2 RETURNING expires_at > now.t AS live),
n AS (SELECT pg_notify('` + Channel + `', $4) FROM d WHERE d.live AND $4 <> '')
SELECT live, (SELECT count(*) FROM n) FROM d`

	// One row at least: the statement's time, then each live lease (NULLs
	// when there is none).
	inspectSQL = `SELECT now.t, l.fence, l.expires_at, 0 FROM ` + nowSQL(2) + `
LEFT JOIN locks l ON l.key = $1 AND l.expires_at > now.t`
	inspectSlotsSQL = `SELECT now.t, l.fence, l.expires_at, COALESCE(l.slot_limit, 0) FROM ` + nowSQL(2) + `
LEFT JOIN lock_slots l ON l.key = $1 AND l.expires_at > now.t ORDER BY l.fence`

	sweepSQL = []string{
		`DELETE FROM locks WHERE key IN (SELECT key FROM locks, ` + nowSQL(1) + `
    WHERE expires_at <= now.t LIMIT 256 FOR UPDATE SKIP LOCKED)`,
		`DELETE FROM lock_slots WHERE (key, owner) IN (SELECT key, owner FROM lock_slots, ` + nowSQL(1) + `
    WHERE expires_at <= now.t LIMIT 256 FOR UPDATE SKIP LOCKED)`,
	}
)

// sweepEvery is how many acquisitions pass between two sweeps of expired
// rows left by holders that never released (their process died).
const sweepEvery = 1024

// now is the bound value of the time parameter: nil for the database's
// clock.
func (s *Store) now() *time.Time {
	if s.clock != nil {
		t := s.clock()
		return &t
	}
	return nil
}

// Acquire implements locks.Store.
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	if err := s.maybeSweep(ctx); err != nil {
		return 0, false, err
	}
	fence, ok, err := s.keyed(ctx, "studio.lock:", key, acquireSQL, []byte(key), owner, ttlRoundUp(ttl), s.now())
	if err != nil {
		return 0, false, fmt.Errorf("acquire lock: %w", err)
	}
	return fence, ok, nil
}

// keyed runs an acquisition (a statement returning the fence drawn) after
// a transaction-scoped advisory lock on the key, in one round trip as an
// implicit transaction. The lock orders every acquisition of the key, so
// their fences are drawn from the sequence in the order they succeed: a
// statement that drew a smaller fence cannot take the key after one that
// drew a larger. For a semaphore it also makes "count the live slots, then
// insert" one step: the insert's snapshot starts after the lock is held.
func (s *Store) keyed(ctx context.Context, space, key, query string, args ...any) (int64, bool, error) {
	var b pgx.Batch
	b.Queue(keyLockSQL, lockKey(space+s.schema+":"+key))
	b.Queue(query, args...)
	res := s.pool.SendBatch(ctx, &b)
	var fence int64
	_, err := res.Exec()
	if err == nil {
		err = res.QueryRow().Scan(&fence)
	}
	if cerr := res.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, interpretLock(err)
	}
	return fence, true, nil
}

// Renew implements locks.Store.
func (s *Store) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	return s.renew(ctx, "renew lock", renewSQL, key, owner, ttl)
}

// Release implements locks.Store.
func (s *Store) Release(ctx context.Context, key, owner string) (bool, error) {
	return s.release(ctx, "release lock", releaseSQL, false, key, owner)
}

// AcquireSlot implements locks.Store.
func (s *Store) AcquireSlot(ctx context.Context, key, owner string, limit int, ttl time.Duration) (int64, bool, error) {
	if err := locks.CheckLimit(limit); err != nil {
		return 0, false, fmt.Errorf("acquire slot: %w", err)
	}
	if err := s.maybeSweep(ctx); err != nil {
		return 0, false, err
	}
	fence, ok, err := s.keyed(ctx, "studio.slot:", key, acquireSlotSQL, []byte(key), owner, ttlRoundUp(ttl), s.now(), limit)
	if err != nil {
		return 0, false, fmt.Errorf("acquire slot: %w", err)
	}
	if !ok {
		// Full, or held under another limit: tell which. (If the other
		// limit's holders left meanwhile, it was full a moment ago.)
		var other int
		err := s.pool.QueryRow(ctx, conflictSQL, []byte(key), s.now(), limit).Scan(&other)
		if err == nil {
			return 0, false, locks.LimitConflict(key, other, limit)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, false, fmt.Errorf("acquire slot: %w", err)
		}
	}
	return fence, ok, nil
}

// RenewSlot implements locks.Store.
func (s *Store) RenewSlot(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	return s.renew(ctx, "renew slot", renewSlotSQL, key, owner, ttl)
}

// ReleaseSlot implements locks.Store.
func (s *Store) ReleaseSlot(ctx context.Context, key, owner string) (bool, error) {
	return s.release(ctx, "release slot", releaseSlotSQL, true, key, owner)
}

func (s *Store) renew(ctx context.Context, op, query, key, owner string, ttl time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, query, []byte(key), owner, ttlRoundUp(ttl), s.now())
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, interpretLock(err))
	}
	return tag.RowsAffected() == 1, nil
}

func (s *Store) release(ctx context.Context, op, query string, slot bool, key, owner string) (bool, error) {
	var (
		live     bool
		notified int64
		payload  string
	)
	if s.notify {
		payload = encodePayload(slot, key, s.schema)
	}
	err := s.pool.QueryRow(ctx, query, []byte(key), owner, s.now(), payload).Scan(&live, &notified)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, interpretLock(err))
	}
	return live, nil
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
	rows, err := s.pool.Query(ctx, query, []byte(key), s.now())
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			now     time.Time
			fence   *int64
			expires *time.Time
			limit   int
		)
		if err := rows.Scan(&now, &fence, &expires, &limit); err != nil {
			return st, err
		}
		st.Now = now
		if fence != nil {
			st.Holders = append(st.Holders, locks.Holder{Fence: *fence, Expires: *expires, Left: expires.Sub(now)})
			st.Limit = max(st.Limit, limit)
		}
	}
	return st, rows.Err()
}

// maybeSweep deletes up to 256 expired rows of each table once every
// sweepEvery acquisitions. An expired row is free already; deleting it
// only keeps the tables small.
func (s *Store) maybeSweep(ctx context.Context) error {
	if s.acquisitions.Add(1)%sweepEvery != 0 {
		return nil
	}
	return s.sweep(ctx)
}

func (s *Store) sweep(ctx context.Context) error {
	for _, q := range sweepSQL {
		if _, err := s.pool.Exec(ctx, q, s.now()); err != nil {
			return fmt.Errorf("sweep expired locks: %w", err)
		}
	}
	return nil
}

// PostgreSQL error codes of the lock tables.
const (
	codeSequenceLimit   = "2200H" // nextval past MAXVALUE
	codeCheckViolation  = "23514"
	codeNumericOverflow = "22003"
)

// interpretLock translates the driver's errors of the lock tables: the
// sequence at its maximum (or a fence past the CHECK) is a fence past
// 2^53-1.
func interpretLock(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case codeSequenceLimit, codeCheckViolation, codeNumericOverflow:
			return fmt.Errorf("%w (%v)", locks.ErrFenceExhausted, err)
		}
	}
	return err
}
