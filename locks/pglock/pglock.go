// Package pglock is a locks.Store in a PostgreSQL database: leases that
// every process using the same schema shares, and a release that wakes the
// waiters of other processes at once (LISTEN/NOTIFY). It opens alone, from
// a URL (Open) or an existing pgx pool (New), and creates only its own
// tables (locks, lock_slots) and sequence (lock_fence); it depends on
// nothing but package locks and pgx.
//
//	ls, err := pglock.Open(ctx, "postgres://app@db/app")
//	if err != nil { ... }
//	defer ls.Close()
//	e := locks.New(ls)
//	defer e.Close()
//
// The tables are those of studio's migration 0002_locks, created IF NOT
// EXISTS, plus a slot_limit column added when missing: a schema studio
// created already works, and studio opens its lock store with New on its
// own pool.
package pglock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channel is the LISTEN/NOTIFY channel on which releases are announced.
// Its payload names the key space, the key and the schema, so stores of
// several schemas in one database ignore each other's releases.
const Channel = "locks_released"

// An Option tunes a store made by Open or New.
type Option func(*Store)

// WithoutNotify makes the store neither announce its releases nor listen
// for others': waiters in other processes then poll (locks.PollInterval).
// For comparisons, and for poolers that do not pass LISTEN through (a
// transaction-mode PgBouncer).
func WithoutNotify() Option { return func(s *Store) { s.notify = false } }

// Open connects to the database at url (a PostgreSQL URL or key=value
// string) and creates the lock tables in the first schema of its
// search_path if missing. Close closes the pool.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password and all.
		return nil, errors.New("pglock: open: the URL does not parse as a PostgreSQL connection string")
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pglock: open: %w", err)
	}
	s, err := New(ctx, pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// New returns the lock store on pool, creating the lock tables in the
// first schema of the pool's search_path if missing. Close leaves the pool
// open (but stops the store's listening connection).
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	s := &Store{pool: pool, notify: true}
	for _, o := range opts {
		o(s)
	}
	// Each acquisition is one implicit transaction whose count must see
	// what the previous holder of the key's advisory lock committed: only
	// READ COMMITTED does. Under a stricter default a semaphore could
	// admit more than its limit.
	var iso string
	if err := pool.QueryRow(ctx, `SELECT current_setting('default_transaction_isolation')`).Scan(&iso); err != nil {
		return nil, fmt.Errorf("pglock: %w", err)
	}
	if iso != "read committed" {
		return nil, fmt.Errorf("pglock: the sessions' default isolation is %q; pglock needs %q, the server's default (see default_transaction_isolation of the role or database)", iso, "read committed")
	}
	if err := s.migrate(ctx); err != nil {
		return nil, fmt.Errorf("pglock: %w", err)
	}
	s.listenCtx, s.stopListen = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the listening connection and, if Open made the pool, closes
// it. Calls in flight end with the pool.
func (s *Store) Close() error {
	s.stopListen()
	s.listening.Wait()
	if s.own {
		s.pool.Close()
	}
	return nil
}

// Pool returns the pool the store runs on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// schema creates what is missing of studio's migration 0002_locks (the
// same sequence, tables and indexes); then slot_limit, the limit each slot
// was taken under (0: a slot of a process that did not record it).
var schema = []string{
	`CREATE SEQUENCE IF NOT EXISTS lock_fence AS bigint MINVALUE 1 MAXVALUE 9007199254740991 CACHE 1 NO CYCLE`,
	`CREATE TABLE IF NOT EXISTS locks (
    key        bytea PRIMARY KEY,
    owner      text NOT NULL,
    fence      bigint NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at timestamptz NOT NULL
)`,
	`CREATE INDEX IF NOT EXISTS locks_by_expiry ON locks (expires_at)`,
	`CREATE TABLE IF NOT EXISTS lock_slots (
    key        bytea NOT NULL,
    owner      text NOT NULL,
    fence      bigint NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
)`,
	`CREATE INDEX IF NOT EXISTS lock_slots_by_expiry ON lock_slots (expires_at)`,
	`ALTER TABLE lock_slots ADD COLUMN IF NOT EXISTS slot_limit integer NOT NULL DEFAULT 0`,
}

// migrate creates what is missing in one transaction, under an advisory
// lock on the schema: CREATE ... IF NOT EXISTS is not safe against a
// second process doing the same at once.
func (s *Store) migrate(ctx context.Context) error {
	var cur *string
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&cur); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if cur == nil {
		return errors.New("migrate: the search_path names no existing schema")
	}
	s.schema = *cur
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey("locks.migrate:"+s.schema)); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		for _, q := range schema {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
		}
		return nil
	})
}

// lockKey maps a name to a 64-bit advisory lock key (FNV-1a), as studio's
// store does, so that processes of either keep agreeing.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// subscribers are the callbacks of Subscribe.
type subscribers struct {
	mu     sync.Mutex
	next   int
	fns    map[int]func(slot bool, key string)
	cancel context.CancelFunc // of the running listener, nil when none
	done   chan struct{}      // closed when it has stopped
	// listens counts the listening connections that have come up (their
	// LISTEN done); releases before the first are not heard.
	listens atomic.Int64
}
