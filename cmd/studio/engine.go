package main

import (
	"context"
	"fmt"
	"path/filepath"

	"studio/bench"
	"studio/blob"
	"studio/blob/s3blob"
	"studio/locks"
	"studio/locks/pglock"
	"studio/locks/sqlitelock"
	"studio/metrics"
	"studio/store"
	"studio/store/postgres"
	"studio/store/sqlite"
	"studio/wake"
)

// engine is what one database engine brings to a process, made in one
// place per engine: the rest of the wiring asks it, never the store's type.
type engine struct {
	// name says which database, for log lines.
	name string
	// store is the engine's store behind a store.Cache: tokens, bindings
	// and ended batches are remembered, and forgotten within
	// store.DefaultCacheMaxAge of a deletion by another process.
	store store.Store
	// lockStore opens the lock store in the same database (--lock-store
	// db). The lock packages create their tables if missing; studio's
	// migration 0002 made them already.
	lockStore func(context.Context) (locks.Store, error)
	// blobs opens the store of asset bytes: files under DATA/assets on
	// SQLite; the database on PostgreSQL, since its processes share no
	// disk; object storage on either with --assets s3://... Only processes
	// that serve or run work open it.
	blobs func() (blob.Store, error)
	// collect registers the collectors that read the database with the
	// process's metrics: its connection pools and its tasks by state.
	collect func(*metrics.Metrics) error
	// reclaim gives the database file's free pages back to the
	// filesystem after a prune; vacuum rewrites it (SQLite only: nil on
	// PostgreSQL, whose autovacuum reuses the space).
	reclaim func(context.Context) (int64, error)
	vacuum  func(context.Context) (before, after int64, err error)
	// applied names the migrations the open applied.
	applied []string
	// floors are the bare statements `studio bench` measures the store
	// against.
	floors bench.Floors
	// wake is the store's hub: its commits' wake-ups, and those of other
	// processes the engine hears (NOTIFY on PostgreSQL, data_version on
	// SQLite), for the workers, the publisher and the events streams.
	wake *wake.Hub
	// walPosition reads PostgreSQL's WAL position in bytes, for the
	// bench's WAL per task (nil on SQLite).
	walPosition func(context.Context) (int64, error)
}

// openEngine opens the configured database and applies pending migrations.
func openEngine(ctx context.Context, cfg Config) (*engine, error) {
	var e *engine
	if cfg.isPostgres() {
		s, err := postgres.Open(ctx, postgres.Config{URL: cfg.Database})
		if err != nil {
			return nil, fmt.Errorf("open database: %w", err)
		}
		e = postgresEngine(s)
	} else {
		s, err := sqlite.Open(ctx, sqlite.Config{Path: cfg.sqlitePath(), Synchronous: cfg.Synchronous})
		if err != nil {
			return nil, fmt.Errorf("open database: %w", err)
		}
		e = sqliteEngine(s, cfg)
	}
	if cfg.Assets != "" {
		// Object storage instead of the engine's own store: the database
		// keeps only the rows that name the bytes.
		e.blobs = func() (blob.Store, error) { return openAssets(cfg.Assets) }
	}
	return e, nil
}

// openAssets opens the object store an s3:// URL names, with credentials
// from the standard AWS variables or credentials file.
func openAssets(url string) (*s3blob.Store, error) {
	s, err := s3blob.Open(url, s3blob.Options{})
	if err != nil {
		return nil, fmt.Errorf("open asset store: %w", err)
	}
	return s, nil
}

// openStore opens the configured database and applies pending migrations,
// for the commands that need nothing else of it.
func openStore(ctx context.Context, cfg Config) (store.Store, error) {
	e, err := openEngine(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return e.store, nil
}

func sqliteEngine(s *sqlite.Store, cfg Config) *engine {
	return &engine{
		name:      "sqlite:" + cfg.sqlitePath(),
		store:     store.NewCache(s, store.CacheConfig{}),
		lockStore: func(ctx context.Context) (locks.Store, error) { return sqlitelock.New(ctx, s.DB()) },
		floors:    sqlite.NewBenchFloors(s),
		wake:      s.Wake(),
		reclaim:   s.Reclaim,
		vacuum:    s.Vacuum,
		blobs: func() (blob.Store, error) {
			fs, err := blob.NewFS(filepath.Join(cfg.Data, "assets"))
			if err != nil {
				return nil, fmt.Errorf("open asset store: %w", err)
			}
			return fs, nil
		},
		collect: func(mx *metrics.Metrics) error {
			if err := mx.DBPool("write", s.DB()); err != nil {
				return err
			}
			if err := mx.DBPool("read", s.ReadDB()); err != nil {
				return err
			}
			return mx.TaskStates(s.CountTasks)
		},
		applied: s.AppliedMigrations(),
	}
}

func postgresEngine(s *postgres.Store) *engine {
	return &engine{
		name:      "postgres",
		store:     store.NewCache(s, store.CacheConfig{}),
		lockStore: func(ctx context.Context) (locks.Store, error) { return pglock.New(ctx, s.Pool()) },
		floors:    postgres.NewBenchFloors(s),
		wake:      s.Wake(),
		blobs:     func() (blob.Store, error) { return postgres.NewBlobStore(s), nil },
		walPosition: func(ctx context.Context) (int64, error) {
			var pos int64
			if err := s.Pool().QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0')::bigint`).Scan(&pos); err != nil {
				return 0, fmt.Errorf("read the WAL position: %w", err)
			}
			return pos, nil
		},
		collect: func(mx *metrics.Metrics) error {
			if err := mx.Registry().Register(newPgxPoolCollector(s.Pool())); err != nil {
				return fmt.Errorf("register the PostgreSQL pool: %w", err)
			}
			return mx.TaskStates(s.CountTasks)
		},
		applied: s.AppliedMigrations(),
	}
}
