// Package postgres is the PostgreSQL implementation of store.Store, on
// github.com/jackc/pgx/v5 and its pool, for many studio processes sharing
// one database.
//
// Every transaction runs at READ COMMITTED, PostgreSQL's default; where a
// method's correctness needs more than that, the method says how it gets it
// (a unique index that makes concurrent inserts wait, a row lock, FOR UPDATE
// SKIP LOCKED). Leases are timed on the database's clock
// (clock_timestamp()), never on the clocks of the processes, which may
// disagree. Record times (created_at, updated_at) come from Config.Now so
// tests can fix them.
//
// The tables live in one schema: Config.Schema, or the first schema of the
// URL's search_path. Several deployments (or parallel tests) can share one
// database in separate schemas.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"studio/intent"
	"studio/migrations"
	"studio/store"
)

// Config opens a store.
type Config struct {
	// URL is a PostgreSQL connection URL (postgres://user@host:port/db?...)
	// or a key=value connection string.
	URL string
	// Schema, when set, is created if missing and made the connections'
	// search_path; when empty the URL's search_path (or the server's
	// default) decides.
	Schema string
	// MaxConns bounds the pool; pgxpool's default (the larger of 4 and the
	// number of CPUs) when zero.
	MaxConns int32
	// Now is the clock for record times; time.Now by default.
	Now func() time.Time
}

// Store is a PostgreSQL-backed store.Store.
type Store struct {
	pool   pool // bounds the wait for a connection (pool.go)
	now    func() time.Time
	schema string // the schema holding the tables
	create bool   // Config.Schema named it: create it if missing
	// applied names the migrations Open applied.
	applied []string
	// wakes publishes the commits' wake-ups, here and to the other
	// processes (wake.go).
	wakes *wakes
	// outage remembers when the lease calls could not get through, so
	// that a claim does not count a lease that expired then against its
	// row's attempts (store.LeaseOutage).
	outage store.LeaseOutage
}

// WatchBatch returns a channel closed when a task of the batch changes,
// and its release (wake.Hub.Watch).
func (s *Store) WatchBatch(batchID string) (<-chan struct{}, func()) {
	return s.wakes.hub.Watch(batchID)
}

// Open connects, creates the schema when Config.Schema asks for one, and
// applies every migration not applied yet, under a lock that makes two
// processes starting at once apply each migration exactly once.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	pcfg, err := poolConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pp, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	w, err := newWakes()
	if err != nil {
		pp.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	s := &Store{pool: pool{pp}, now: cfg.Now, schema: cfg.Schema, create: cfg.Schema != "", wakes: w}
	if err := s.migrate(ctx); err != nil {
		pp.Close()
		return nil, err
	}
	w.hub.Feed(s.listen)
	return s, nil
}

func poolConfig(cfg Config) (*pgxpool.Config, error) {
	if cfg.URL == "" {
		return nil, errors.New("open postgres: empty URL")
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// The parse error may quote the URL, password and all.
		return nil, errors.New("open postgres: the URL does not parse as a PostgreSQL connection string")
	}
	if cfg.Schema != "" {
		pcfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{cfg.Schema}.Sanitize()
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	return pcfg, nil
}

// Close stops the listener and closes the pool, waiting for connections
// in use to be returned.
func (s *Store) Close() error {
	s.wakes.hub.Close()
	s.pool.Close()
	return nil
}

// Pool returns the connection pool, for code of this engine that keeps its
// own tables in the same schema (the lock store, the blob store) and for
// benchmarks of bare statements.
func (s *Store) Pool() *pgxpool.Pool { return s.pool.Pool }

// Schema is the schema holding the store's tables.
func (s *Store) Schema() string { return s.schema }

// Ping checks the database answers and every migration is applied.
func (s *Store) Ping(ctx context.Context) error {
	ms, err := migrations.For("postgres")
	if err != nil {
		return err
	}
	var applied []int32
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(array_agg(version), '{}') FROM schema_migrations`).Scan(&applied); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	for _, m := range ms {
		if !slices.Contains(applied, int32(m.Version)) {
			return fmt.Errorf("ping postgres: migration %04d_%s not applied", m.Version, m.Name)
		}
	}
	return nil
}

// migrate applies the pending migrations. Each one runs in its own
// transaction that first takes a transaction-scoped advisory lock keyed by
// the schema, then re-reads schema_migrations: a second process starting at
// the same time waits on the lock and then finds the migration applied.
// DDL is transactional in PostgreSQL, so a failed migration leaves nothing.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.For("postgres")
	if err != nil {
		return err
	}
	schema := s.schema
	if schema == "" {
		var cur *string
		if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&cur); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if cur == nil {
			return errors.New("migrate: the search_path names no existing schema")
		}
		schema = *cur
	}
	s.schema = schema
	key := lockKey("studio.migrate:" + schema)
	for _, m := range ms {
		applied, err := s.apply(ctx, key, m)
		if err != nil {
			return fmt.Errorf("migrate %04d_%s: %w", m.Version, m.Name, err)
		}
		if applied {
			s.applied = append(s.applied, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
	}
	return nil
}

// AppliedMigrations names the migrations Open applied (0001_init, ...), in
// order; none when the database was up to date.
func (s *Store) AppliedMigrations() []string { return s.applied }

// apply applies one migration unless it is applied already; it says
// whether it did.
func (s *Store) apply(ctx context.Context, key int64, m migrations.Migration) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, key); err != nil {
			return err
		}
		if s.create {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, m.Version).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		// No arguments: the simple protocol, which runs every statement of
		// the file.
		if _, err := tx.Exec(ctx, m.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
		applied = err == nil
		return err
	})
	return applied && err == nil, err
}

// lockKey maps a name to a 64-bit advisory lock key.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// PostgreSQL error codes the store translates.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
)

// interpret translates driver errors into domain errors, once, here.
func interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return &intent.Error{Code: intent.ENotFound, Message: "Not found."}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == codeUniqueViolation {
		return &intent.Error{Code: intent.EConflict, Message: "Already exists."}
	}
	return err
}

// stamp rounds a time to what timestamptz keeps (microseconds), in UTC, so a
// time handed back equals the one read later.
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
