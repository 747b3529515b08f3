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

	"studio/blob/s3blob"
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
	// Assets is where asset bytes go: empty for the engine's own store
	// (files under --data on SQLite, the blobs table on PostgreSQL), or an
	// s3:// URL of S3-compatible object storage.
	Assets string
	// AssetsRedirect, when positive, answers asset content in the object
	// store with a redirect to a presigned URL valid this long.
	AssetsRedirect time.Duration
	// Limits (limits.go).
	BodyTimeout     time.Duration
	WriteStall      time.Duration
	MaxUploadPixels int64
	DBWait          time.Duration
	MinFreeMiB      int64
	// Retain prunes ended batches older than this in the background
	// (retention.go); 0 keeps everything.
	Retain age
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

// commands is a set of the commands that read a Config from flags.
type commands uint16

const (
	cmdServe commands = 1 << iota
	cmdWorker
	cmdMigrate
	cmdToken
	cmdBench
	cmdAssets
	cmdPrune
	cmdVacuum
	cmdBackup

	// processes are the long-running commands: serve and worker.
	processes = cmdServe | cmdWorker
	// everyCommand is every command that opens the database.
	everyCommand = processes | cmdMigrate | cmdToken | cmdBench | cmdAssets | cmdPrune | cmdVacuum | cmdBackup
)

// commandNames names each command as its flag set does ("studio NAME").
var commandNames = map[commands]string{
	cmdServe:   modeServe,
	cmdWorker:  modeWorker,
	cmdMigrate: "migrate",
	cmdToken:   "token create",
	cmdBench:   "bench",
	cmdAssets:  "assets copy",
	cmdPrune:   "prune",
	cmdVacuum:  "vacuum",
	cmdBackup:  "backup",
}

// flagDef is one flag of the table: its name, its environment variable,
// the commands that accept it, the Config field it sets and its help.
type flagDef struct {
	name, env string
	in        commands
	field     func(c *Config) any // *string, *int, *int64 or *time.Duration
	usage     string              // " (env VAR)" is appended
}

// flags is the one table of the commands' flags: a new flag is added here,
// with the commands that take it, and nowhere else. The tests check that
// every Config field has a flag, every flag a command, and every command
// parses each of its flags and their variables.
var flags = []flagDef{
	{"data", "STUDIO_DATA", everyCommand, func(c *Config) any { return &c.Data },
		"data directory: holds studio.db, assets/, uploads/ (bodies being checked), gallery/ (published images, with the files store) and token"},
	{"addr", "STUDIO_ADDR", cmdServe, func(c *Config) any { return &c.Addr },
		"HTTP listen address, HOST:PORT; port 0 picks a free one"},
	{"workers", "STUDIO_WORKERS", cmdServe, func(c *Config) any { return &c.Workers },
		"in-process workers; 0 = API only"},
	{"concurrency", "STUDIO_WORKERS", cmdWorker, func(c *Config) any { return &c.Workers },
		"tasks run at once by this worker process"},
	{"lease-ttl", "STUDIO_LEASE_TTL", processes, func(c *Config) any { return &c.LeaseTTL },
		"task lease length; renewed every third of it"},
	{"max-batch-tasks", "STUDIO_MAX_BATCH_TASKS", cmdServe, func(c *Config) any { return &c.MaxBatchTasks },
		"largest plan accepted, in tasks"},
	{"max-attempts", "STUDIO_MAX_ATTEMPTS", processes, func(c *Config) any { return &c.MaxAttempts },
		"tries before a task is failed"},
	{"retry-base", "STUDIO_RETRY_BASE", processes, func(c *Config) any { return &c.RetryBase },
		"first retry delay; doubles per attempt with jitter, at most 1m"},
	{"catalog", "STUDIO_CATALOG", processes, func(c *Config) any { return &c.Catalog },
		"catalog JSON file; empty = the embedded catalog"},
	{"database", "STUDIO_DATABASE_URL", everyCommand, func(c *Config) any { return &c.Database },
		"database URL; empty = SQLite in --data; postgres://... selects PostgreSQL"},
	{"lock-store", "STUDIO_LOCK_STORE", processes, func(c *Config) any { return &c.LockStore },
		"memory, db or a redis:// URL (locks shared through Redis); default memory on SQLite, db on PostgreSQL"},
	{"log-level", "STUDIO_LOG_LEVEL", processes, func(c *Config) any { return &c.LogLevel },
		"debug, info, warn or error"},
	{"debug-addr", "STUDIO_DEBUG_ADDR", processes, func(c *Config) any { return &c.DebugAddr },
		"serve net/http/pprof on this separate address; empty = off"},
	{"sqlite-synchronous", "STUDIO_SQLITE_SYNCHRONOUS", everyCommand, func(c *Config) any { return &c.Synchronous },
		"FULL (a 201 survives a machine crash) or NORMAL (survives a process crash; faster)"},
	{"grace", "STUDIO_GRACE", processes, func(c *Config) any { return &c.Grace },
		"on SIGTERM, how long running steps may take before their leases are handed back"},
	{"webhook-url", "STUDIO_WEBHOOK_URL", processes, func(c *Config) any { return &c.WebhookURL },
		"URL the webhook publication channel POSTs each item to; empty = no webhook channel"},
	{"assets", "STUDIO_ASSETS", processes | cmdBench | cmdAssets, func(c *Config) any { return &c.Assets },
		"where asset bytes go: empty = files under --data on SQLite, the blobs table on PostgreSQL; s3://BUCKET/PREFIX?endpoint=URL&region=R = S3-compatible object storage (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws/credentials)"},
	{"assets-redirect", "STUDIO_ASSETS_REDIRECT", cmdServe, func(c *Config) any { return &c.AssetsRedirect },
		"with --assets s3://..., answer asset content with a redirect to a presigned URL valid this long (e.g. 5m); 0 = stream it through studio"},
	{"body-timeout", "STUDIO_BODY_TIMEOUT", cmdServe, func(c *Config) any { return &c.BodyTimeout },
		"time to read a request body; slower is 408 and the connection closed; 0 = no limit"},
	{"write-stall", "STUDIO_WRITE_STALL", cmdServe, func(c *Config) any { return &c.WriteStall },
		"an answer whose write makes no progress this long is cut; 0 = no limit"},
	{"max-upload-pixels", "STUDIO_MAX_UPLOAD_PIXELS", cmdServe, func(c *Config) any { return &c.MaxUploadPixels },
		"largest uploaded image, in pixels (width x height)"},
	{"db-wait", "STUDIO_DB_WAIT", cmdServe, func(c *Config) any { return &c.DBWait },
		"longest a request waits for the database (SQLite: its write lock; PostgreSQL: a pooled connection, a write's row or table lock); then 503 with Retry-After; 0 = no bound (SQLite's 10s busy timeout)"},
	{"min-free-mib", "STUDIO_MIN_FREE_MIB", cmdServe, func(c *Config) any { return &c.MinFreeMiB },
		"/readyz answers 503 while the data directory's volume has less free, in MiB; 0 = no check"},
	{"retain", "STUDIO_RETAIN", cmdServe, func(c *Config) any { return &c.Retain },
		"prune ended batches older than this (30d, 12h) in the background; 0 = keep everything"},
}

// newFlagSet declares on cfg the flags of the table that cmd accepts, with
// their environment variables, and returns the set and a function that
// applies the environment after parsing (a flag on the command line wins).
func newFlagSet(cmd commands, cfg *Config, stderr io.Writer) (*flag.FlagSet, func() error) {
	fs := flag.NewFlagSet("studio "+commandNames[cmd], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var mine []flagDef
	for _, d := range flags {
		if d.in&cmd == 0 {
			continue
		}
		usage := d.usage + " (env " + d.env + ")"
		switch p := d.field(cfg).(type) {
		case *string:
			fs.StringVar(p, d.name, *p, usage)
		case *int:
			fs.IntVar(p, d.name, *p, usage)
		case *int64:
			fs.Int64Var(p, d.name, *p, usage)
		case *time.Duration:
			fs.DurationVar(p, d.name, *p, usage)
		case flag.Value:
			fs.Var(p, d.name, usage)
		default:
			panic(fmt.Sprintf("flag --%s: no flag type for %T", d.name, p))
		}
		mine = append(mine, d)
	}
	applyEnv := func() error {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, d := range mine {
			v, ok := os.LookupEnv(d.env)
			if !ok || set[d.name] {
				continue
			}
			if err := fs.Set(d.name, v); err != nil {
				return fmt.Errorf("%s=%q: %w", d.env, v, err)
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
	return errors.Join(append(errs, c.validateValues()...)...)
}

// validateValues checks each value is one its flag takes.
func (c *Config) validateValues() []error {
	var errs []error
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
	switch {
	case c.LockStore == "", c.LockStore == "memory", c.LockStore == "db", isRedisURL(c.LockStore):
	default:
		errs = append(errs, fmt.Errorf("--lock-store must be memory, db or a redis:// URL, not %q", c.LockStore))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.Assets != "" && !s3blob.IsURL(c.Assets) {
		errs = append(errs, fmt.Errorf("--assets must be empty or an s3:// URL, not %q", c.Assets))
	}
	if c.AssetsRedirect < 0 || (c.AssetsRedirect > 0 && c.Assets == "") {
		errs = append(errs, errors.New("--assets-redirect needs --assets s3://... and a positive duration"))
	}
	return append(errs, c.validateFlags()...)
}

// isRedisURL says whether a --lock-store names a Redis.
func isRedisURL(s string) bool {
	return strings.HasPrefix(s, "redis://") || strings.HasPrefix(s, "rediss://")
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
