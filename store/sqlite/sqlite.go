// Package sqlite is the SQLite implementation of store.Store, on the pure-Go
// driver modernc.org/sqlite.
//
// One file, WAL mode, foreign keys on. Writes go through a pool of exactly
// one connection, so writers in this process wait in Go instead of polling
// SQLite's busy handler (database/sql hands the freed connection to a
// waiter picked at random: fair on average, not first come first served); every write transaction begins IMMEDIATE
// (_txlock=immediate), so it holds the write lock from its first statement
// and a read-then-write inside it cannot be overtaken. Other processes on the
// same file wait through busy_timeout. Reads use a separate pool of
// read-only connections that WAL lets run beside the writer.
//
// Every method runs its SQL in one of two helpers (conn.go): s.write, an
// IMMEDIATE transaction on the write connection, and s.read, a read
// transaction on a read connection; both keep each statement prepared on
// its connection. The lease methods (tasks and publication items) wrap
// s.write in leaseWrite, which adds the database's clock and moves the
// parents' counts before the commit.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"studio/intent"
	"studio/migrations"
	"studio/store"
	"studio/wake"
)

// Synchronous modes for Config.Synchronous.
const (
	// SyncFull fsyncs the WAL at every commit: an answered commit survives a
	// crash of the machine. The default.
	SyncFull = "FULL"
	// SyncNormal fsyncs at checkpoints only: an answered commit survives a
	// crash of the process, but the last commits may be lost if the machine
	// loses power.
	SyncNormal = "NORMAL"
)

// Config opens a store.
type Config struct {
	// Path of the database file; created with its directory if missing.
	Path string
	// Synchronous is SyncFull (default) or SyncNormal.
	Synchronous string
	// Now is the clock for created/updated times; time.Now by default.
	Now func() time.Time
	// ReadConns bounds the read pool; 4 by default.
	ReadConns int
	// WatchInterval is how often the store looks whether another process
	// committed to the file (PRAGMA data_version), while anyone in this
	// process listens on its hub (Wake); DefaultWatchInterval when zero,
	// never when negative.
	WatchInterval time.Duration
}

// Store is a SQLite-backed store.Store.
type Store struct {
	writeDB *sql.DB // exactly one connection: s.write (conn.go)
	readDB  *sql.DB // read-only connections: s.read
	now     func() time.Time
	path    string
	// applied names the migrations Open applied.
	applied []string
	// wake is the hub the store's commits are published on (wake.go).
	wake *wake.Hub
	// onWatch, when set, is called after each look for other processes'
	// commits (tests).
	onWatch func()
	// outage remembers when the lease calls could not get through, so
	// that a claim does not count a lease that expired then against its
	// row's attempts (store.LeaseOutage).
	outage store.LeaseOutage
}

// Open opens (creating if needed) the database at cfg.Path and applies every
// migration not applied yet.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	sync := strings.ToUpper(cfg.Synchronous)
	if sync == "" {
		sync = SyncFull
	}
	if sync != SyncFull && sync != SyncNormal {
		return nil, fmt.Errorf("open sqlite: synchronous must be FULL or NORMAL, not %q", cfg.Synchronous)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReadConns <= 0 {
		cfg.ReadConns = 4
	}
	if dir := filepath.Dir(cfg.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
	}
	// Made here, owner-only, when missing: SQLite gives the -wal and -shm
	// files the mode of the database file.
	if f, err := os.OpenFile(cfg.Path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	pragmas := []string{
		"busy_timeout(10000)",
		"journal_mode(WAL)",
		"foreign_keys(1)",
		"synchronous(" + sync + ")",
	}
	dsn := func(extra ...string) string {
		q := url.Values{}
		for _, p := range append(pragmas, extra...) {
			q.Add("_pragma", p)
		}
		return "file:" + cfg.Path + "?" + q.Encode()
	}
	// The pools' connections are conns (conn.go): the statements
	// prepared on each live and go with it.
	write := openDB(dsn() + "&_txlock=immediate")
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxIdleTime(0)
	write.SetConnMaxLifetime(0)
	s := &Store{writeDB: write, now: cfg.Now, path: cfg.Path, wake: wake.New()}
	if err := s.incrementalIfNew(ctx); err != nil {
		write.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		write.Close()
		return nil, err
	}
	read := openDB(dsn("query_only(1)"))
	read.SetMaxOpenConns(cfg.ReadConns)
	read.SetMaxIdleConns(cfg.ReadConns)
	s.readDB = read
	s.watchOthers(cfg.WatchInterval)
	return s, nil
}

// Close stops the hub's feed and closes both pools.
func (s *Store) Close() error {
	s.wake.Close()
	var errs []error
	if s.readDB != nil {
		errs = append(errs, s.readDB.Close())
	}
	errs = append(errs, s.writeDB.Close())
	return errors.Join(errs...)
}

// WatchBatch returns a channel closed when a task of the batch changes,
// and its release (wake.Hub.Watch).
func (s *Store) WatchBatch(batchID string) (<-chan struct{}, func()) {
	return s.wake.Watch(batchID)
}

// DB returns the write pool (one connection, IMMEDIATE transactions) for
// code of this engine that keeps its own tables in the same file, such as
// the lock store, and for benchmarks of bare statements.
func (s *Store) DB() *sql.DB { return s.writeDB }

// ReadDB returns the read-only pool.
func (s *Store) ReadDB() *sql.DB { return s.readDB }

// Ping checks the database answers and every migration is applied.
func (s *Store) Ping(ctx context.Context) error {
	ms, err := migrations.For("sqlite")
	if err != nil {
		return err
	}
	var v int
	if err := s.read(ctx, func(t *tx) error {
		return t.queryRow(`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	}); err != nil {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	if len(ms) > 0 && v < ms[len(ms)-1].Version {
		return fmt.Errorf("ping sqlite: schema at version %d, want %d", v, ms[len(ms)-1].Version)
	}
	return nil
}

// migrate applies the pending migrations, each in its own IMMEDIATE
// transaction that re-checks whether another process applied it first.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.For("sqlite")
	if err != nil {
		return err
	}
	if err := s.write(ctx, func(t *tx) error {
		return t.execScript(`CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL)`)
	}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range ms {
		applied, err := s.apply(ctx, m)
		if err != nil {
			return fmt.Errorf("migrate %04d_%s: %w", m.Version, m.Name, err)
		}
		if applied {
			s.applied = append(s.applied, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
	}
	return nil
}

// apply applies one migration unless it is applied already; it says
// whether it did.
func (s *Store) apply(ctx context.Context, m migrations.Migration) (bool, error) {
	applied := false
	err := s.write(ctx, func(t *tx) error {
		var n int
		if err := t.queryRow(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if err := t.execScript(m.SQL); err != nil {
			return err
		}
		if _, err := t.exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Name, s.now().UnixMilli()); err != nil {
			return err
		}
		applied = true
		return nil
	})
	return applied, err
}

// AppliedMigrations names the migrations Open applied (0001_init, ...), in
// order; none when the database was up to date.
func (s *Store) AppliedMigrations() []string { return s.applied }

// interpret translates driver errors into domain errors, once, here.
func interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return &intent.Error{Code: intent.ENotFound, Message: "Not found."}
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w", &intent.Error{Code: intent.EConflict, Message: "Already exists."})
		}
	}
	return err
}

// ms converts a time to the stored integer milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

// fromMS converts stored milliseconds to a UTC time.
func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// Path is the database file's path.
func (s *Store) Path() string { return s.path }
