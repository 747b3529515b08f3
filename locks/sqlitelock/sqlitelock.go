// Package sqlitelock is a locks.Store in a SQLite database: leases that
// every process opening the same file shares. It opens alone, from a path
// (Open) or an existing *sql.DB of the modernc.org/sqlite driver (New),
// and creates only its own tables (locks, lock_slots, lock_fence); it
// depends on nothing but package locks and the driver.
//
//	ls, err := sqlitelock.Open(ctx, "app.db")
//	if err != nil { ... }
//	defer ls.Close()
//	e := locks.New(ls)
//	defer e.Close()
//
// Its tables are those of studio's migration 0002_locks, created IF NOT
// EXISTS, plus a slot_limit column added when missing: a database that
// studio created already works, and studio itself opens its lock store
// with New on its write connection.
package sqlitelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// BusyTimeout is how long a statement of a store made by Open waits for
// another process's write to end (SQLite's busy_timeout), in milliseconds.
const BusyTimeout = 10000

// Open opens (creating if needed) the SQLite database at path with one
// write connection, WAL, synchronous FULL and busy_timeout BusyTimeout,
// and creates the lock tables if missing. Close closes the database.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlitelock: open: empty path")
	}
	q := url.Values{}
	for _, p := range []string{fmt.Sprintf("busy_timeout(%d)", BusyTimeout), "journal_mode(WAL)", "synchronous(FULL)"} {
		q.Add("_pragma", p)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode()+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlitelock: open %s: %w", path, err)
	}
	// One connection: Go queues this process's writers fairly, instead of
	// SQLite's busy handler polling between them.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	s, err := New(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.own = true
	return s, nil
}

// New returns the lock store on db, an open database of the
// modernc.org/sqlite driver, creating the lock tables if missing. Give it
// a pool of one connection (SetMaxOpenConns(1)) with a busy_timeout: each
// call is one statement, and a single connection serializes this process's
// writers fairly. Close leaves db open.
func New(ctx context.Context, db *sql.DB) (*Store, error) {
	if err := migrate(ctx, db); err != nil {
		return nil, fmt.Errorf("sqlitelock: %w", err)
	}
	return &Store{db: db}, nil
}

// schema creates what is missing of studio's migration 0002_locks (the
// same tables, triggers and row), so a database studio created is already
// in shape. slot_limit comes after: see migrate.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS lock_fence (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    floor INTEGER NOT NULL CHECK (floor BETWEEN 0 AND 9007199254740991)
)`,
	`INSERT OR IGNORE INTO lock_fence (id, floor) VALUES (1, 0)`,
	`CREATE TABLE IF NOT EXISTS locks (
    key        BLOB PRIMARY KEY,
    owner      TEXT NOT NULL,
    fence      INTEGER NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at INTEGER NOT NULL
) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS lock_slots (
    key        BLOB NOT NULL,
    slot       INTEGER NOT NULL,
    owner      TEXT NOT NULL,
    fence      INTEGER NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (key, slot)
) WITHOUT ROWID`,
	`CREATE TRIGGER IF NOT EXISTS locks_keep_fence AFTER DELETE ON locks
BEGIN
    UPDATE lock_fence SET floor = OLD.fence WHERE id = 1 AND floor < OLD.fence;
END`,
	`CREATE TRIGGER IF NOT EXISTS lock_slots_keep_fence AFTER DELETE ON lock_slots
BEGIN
    UPDATE lock_fence SET floor = OLD.fence WHERE id = 1 AND floor < OLD.fence;
END`,
}

// migrate brings the lock tables up to date in one IMMEDIATE transaction,
// so that processes opening one file at once do it one after the other.
// The only change past 0002 is lock_slots.slot_limit, the limit each slot
// was taken under (0: a slot of a process that did not record it).
func migrate(ctx context.Context, db *sql.DB) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	for _, q := range schema {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	var has bool
	if err := conn.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM pragma_table_info('lock_slots') WHERE name = 'slot_limit')`).Scan(&has); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !has {
		if _, err := conn.ExecContext(ctx, `ALTER TABLE lock_slots ADD COLUMN slot_limit INTEGER NOT NULL DEFAULT 0`); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
