package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Config is everything the commands read from flags and the environment.
// A flag given on the command line wins over its environment variable,
// which wins over the default.
type Config struct {
	Data          string
	Addr          string
	Workers       int
	LeaseTTL      time.Duration
	MaxBatchTasks int
	MaxAttempts   int
	RetryBase     time.Duration
	Catalog       string
	Database      string
	LockStore     string
	LogLevel      string
	DebugAddr     string
	Synchronous   string
	Grace         time.Duration
	WebhookURL    string
	// Limits (limits.go).
	BodyTimeout     time.Duration
	WriteStall      time.Duration
	MaxUploadPixels int64
	DBWait          time.Duration
	MinFreeMiB      int64
}

// DefaultConfig is the configuration with no flags and no environment.
func DefaultConfig() Config {
	c := Config{
		Data:          "./studio-data",
		Addr:          "127.0.0.1:7070",
		Workers:       4,
		LeaseTTL:      30 * time.Second,
		MaxBatchTasks: 600,
		MaxAttempts:   5,
		RetryBase:     500 * time.Millisecond,
		LogLevel:      "info",
		Synchronous:   "FULL",
		Grace:         10 * time.Second,
	}
	limitDefaults(&c)
	return c
}

// flagSpec binds one flag to its environment variable.
type flagSpec struct {
	name, env string
}

// newFlagSet declares the flags a command takes (by name) on cfg, with env
// variables as defaults, and returns the set and a function that applies
// the environment after parsing.
func newFlagSet(cmd string, cfg *Config, stderr io.Writer, names ...string) (*flag.FlagSet, func() error) {
	fs := flag.NewFlagSet("studio "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var specs []flagSpec
	add := func(name, env string, declare func()) {
		for _, n := range names {
			if n == name {
				declare()
				specs = append(specs, flagSpec{name, env})
				return
			}
		}
	}
	add("data", "STUDIO_DATA", func() {
		fs.StringVar(&cfg.Data, "data", cfg.Data, "data directory: holds studio.db, assets/ and token (env STUDIO_DATA)")
	})
	add("addr", "STUDIO_ADDR", func() {
		fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "HTTP listen address, HOST:PORT; port 0 picks a free one (env STUDIO_ADDR)")
	})
	add("workers", "STUDIO_WORKERS", func() {
		fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "in-process workers; 0 = API only (env STUDIO_WORKERS)")
	})
	add("concurrency", "STUDIO_WORKERS", func() {
		fs.IntVar(&cfg.Workers, "concurrency", cfg.Workers, "tasks run at once by this worker process (env STUDIO_WORKERS)")
	})
	add("lease-ttl", "STUDIO_LEASE_TTL", func() {
		fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL, "task lease length; renewed every third of it (env STUDIO_LEASE_TTL)")
	})
	add("max-batch-tasks", "STUDIO_MAX_BATCH_TASKS", func() {
		fs.IntVar(&cfg.MaxBatchTasks, "max-batch-tasks", cfg.MaxBatchTasks, "largest plan accepted, in tasks (env STUDIO_MAX_BATCH_TASKS)")
	})
	add("max-attempts", "STUDIO_MAX_ATTEMPTS", func() {
		fs.IntVar(&cfg.MaxAttempts, "max-attempts", cfg.MaxAttempts, "tries before a task is failed (env STUDIO_MAX_ATTEMPTS)")
	})
	add("retry-base", "STUDIO_RETRY_BASE", func() {
		fs.DurationVar(&cfg.RetryBase, "retry-base", cfg.RetryBase, "first retry delay; doubles per attempt with jitter, at most 1m (env STUDIO_RETRY_BASE)")
	})
	add("catalog", "STUDIO_CATALOG", func() {
		fs.StringVar(&cfg.Catalog, "catalog", cfg.Catalog, "catalog JSON file; empty = the embedded catalog (env STUDIO_CATALOG)")
	})
	add("database", "STUDIO_DATABASE_URL", func() {
		fs.StringVar(&cfg.Database, "database", cfg.Database, "database URL; empty = SQLite in --data; postgres://... selects PostgreSQL (env STUDIO_DATABASE_URL)")
	})
	add("lock-store", "STUDIO_LOCK_STORE", func() {
		fs.StringVar(&cfg.LockStore, "lock-store", cfg.LockStore, "memory or db; default memory on SQLite, db on PostgreSQL (env STUDIO_LOCK_STORE)")
	})
	add("log-level", "STUDIO_LOG_LEVEL", func() {
		fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error (env STUDIO_LOG_LEVEL)")
	})
	add("debug-addr", "STUDIO_DEBUG_ADDR", func() {
		fs.StringVar(&cfg.DebugAddr, "debug-addr", cfg.DebugAddr, "serve net/http/pprof on this separate address; empty = off (env STUDIO_DEBUG_ADDR)")
	})
	add("sqlite-synchronous", "STUDIO_SQLITE_SYNCHRONOUS", func() {
		fs.StringVar(&cfg.Synchronous, "sqlite-synchronous", cfg.Synchronous, "FULL (a 201 survives a machine crash) or NORMAL (survives a process crash; faster) (env STUDIO_SQLITE_SYNCHRONOUS)")
	})
	add("grace", "STUDIO_GRACE", func() {
		fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "on SIGTERM, how long running steps may take before their leases are handed back (env STUDIO_GRACE)")
	})
	add("webhook-url", "STUDIO_WEBHOOK_URL", func() {
		fs.StringVar(&cfg.WebhookURL, "webhook-url", cfg.WebhookURL, "URL the webhook publication channel POSTs each item to; empty = no webhook channel (env STUDIO_WEBHOOK_URL)")
	})
	add("body-timeout", "STUDIO_BODY_TIMEOUT", func() {
		fs.DurationVar(&cfg.BodyTimeout, "body-timeout", cfg.BodyTimeout, "time to read a request body; slower is 408 and the connection closed; 0 = no limit (env STUDIO_BODY_TIMEOUT)")
	})
	add("write-stall", "STUDIO_WRITE_STALL", func() {
		fs.DurationVar(&cfg.WriteStall, "write-stall", cfg.WriteStall, "an answer whose write makes no progress this long is cut; 0 = no limit (env STUDIO_WRITE_STALL)")
	})
	add("max-upload-pixels", "STUDIO_MAX_UPLOAD_PIXELS", func() {
		fs.Int64Var(&cfg.MaxUploadPixels, "max-upload-pixels", cfg.MaxUploadPixels, "largest uploaded image, in pixels (width x height) (env STUDIO_MAX_UPLOAD_PIXELS)")
	})
	add("db-wait", "STUDIO_DB_WAIT", func() {
		fs.DurationVar(&cfg.DBWait, "db-wait", cfg.DBWait, "longest a request waits for the database's write lock; then 503 with Retry-After; 0 = SQLite's 10s busy timeout (env STUDIO_DB_WAIT)")
	})
	add("min-free-mib", "STUDIO_MIN_FREE_MIB", func() {
		fs.Int64Var(&cfg.MinFreeMiB, "min-free-mib", cfg.MinFreeMiB, "/readyz answers 503 while the data directory's volume has less free, in MiB; 0 = no check (env STUDIO_MIN_FREE_MIB)")
	})
	applyEnv := func() error {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, s := range specs {
			v, ok := os.LookupEnv(s.env)
			if !ok || set[s.name] {
				continue
			}
			if err := fs.Set(s.name, v); err != nil {
				return fmt.Errorf("%s=%q: %w", s.env, v, err)
			}
		}
		return nil
	}
	return fs, applyEnv
}

// validate checks the values a serving or working process needs.
func (c *Config) validate() error {
	var errs []error
	if c.Data == "" && c.Database == "" {
		errs = append(errs, errors.New("--data must not be empty"))
	}
	if c.Workers < 0 {
		errs = append(errs, errors.New("--workers must be 0 or more"))
	}
	if c.LeaseTTL < 100*time.Millisecond {
		errs = append(errs, errors.New("--lease-ttl must be at least 100ms"))
	}
	if c.MaxBatchTasks < 1 {
		errs = append(errs, errors.New("--max-batch-tasks must be at least 1"))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, errors.New("--max-attempts must be at least 1"))
	}
	if c.RetryBase <= 0 {
		errs = append(errs, errors.New("--retry-base must be positive"))
	}
	switch c.LockStore {
	case "", "memory", "db":
	default:
		errs = append(errs, fmt.Errorf("--lock-store must be memory or db, not %q", c.LockStore))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateFlags()...)
	return errors.Join(errs...)
}

// isPostgres says whether the configured database is PostgreSQL.
func (c *Config) isPostgres() bool {
	return strings.HasPrefix(c.Database, "postgres://") || strings.HasPrefix(c.Database, "postgresql://")
}

// sqlitePath is the SQLite file: --database as a path (or file: URL), or
// studio.db in --data.
func (c *Config) sqlitePath() string {
	if c.Database != "" && !c.isPostgres() {
		return strings.TrimPrefix(strings.TrimPrefix(c.Database, "sqlite://"), "file:")
	}
	return filepath.Join(c.Data, "studio.db")
}

// lockStore is the effective lock store: memory on SQLite, db on PostgreSQL,
// unless set.
func (c *Config) lockStore() string {
	if c.LockStore != "" {
		return c.LockStore
	}
	if c.isPostgres() {
		return "db"
	}
	return "memory"
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level must be debug, info, warn or error, not %q", s)
	}
	return l, nil
}

// newLogger logs JSON, or text when w is a terminal.
func newLogger(w io.Writer, level string) *slog.Logger {
	l, _ := parseLevel(level)
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: readableDurations}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return slog.New(slog.NewTextHandler(w, opts))
		}
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
