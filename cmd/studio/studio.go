package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"studio/blob"
	"studio/httpapi"
	"studio/metrics"
	"studio/store"
)

// Modes of a running process.
const (
	modeServe  = "serve"  // HTTP API plus in-process workers
	modeWorker = "worker" // workers only
)

// Main is one running studio process: its store, HTTP server and workers.
// Run starts it and returns once it serves; Close stops it gracefully. An
// end-to-end test runs the whole program this way on port 0.
type Main struct {
	Config Config
	Mode   string
	Stdout io.Writer
	Logger *slog.Logger

	engine    *engine
	store     store.Store // engine.store, its deletions counted in the metrics
	blobs     blob.Store
	ln        net.Listener
	server    *http.Server
	debug     *http.Server
	metrics   *metrics.Metrics                  // served at /metrics, and on the debug listener
	closers   []func(ctx context.Context) error // run in reverse order on Close
	closeOnce sync.Once
	closeErr  error
	// firstToken is the token this start created, until the web studio's
	// sign-in link has been printed.
	firstToken string
}

// NewMain returns a process for mode with cfg, logging to stderr.
func NewMain(cfg Config, mode string, stdout, stderr io.Writer) *Main {
	return &Main{Config: cfg, Mode: mode, Stdout: stdout, Logger: newLogger(stderr, cfg.LogLevel)}
}

// Run opens the store, makes the first token if there is none (serve),
// starts the workers and the HTTP server, and returns.
func (m *Main) Run(ctx context.Context) error {
	cfg := m.Config
	if err := makeDataDir(cfg.Data); err != nil {
		return err
	}
	e := m.engine // set before Run: a store the caller owns (studio bench)
	if e == nil {
		var err error
		if e, err = openEngine(ctx, cfg); err != nil {
			return err
		}
		m.onClose(func(context.Context) error { return e.store.Close() })
	}
	m.engine, m.store = e, e.store
	for _, name := range e.applied {
		m.Logger.Info("migration applied", "migration", name)
	}

	deps, err := m.build(ctx)
	if err != nil {
		return err
	}
	if m.Mode == modeServe {
		if err := m.ensureFirstToken(ctx); err != nil {
			return err
		}
	}
	if err := m.startWorkers(ctx, deps); err != nil {
		return err
	}
	if err := m.startPublisher(ctx, deps); err != nil {
		return err
	}
	if m.Mode == modeServe {
		m.startRetention()
		if err := m.startHTTP(deps); err != nil {
			return err
		}
		m.printStudioLink()
	}
	if cfg.DebugAddr != "" {
		if err := m.startDebug(); err != nil {
			return err
		}
	}
	return nil
}

// Addr is the address the HTTP server listens on (useful with port 0).
func (m *Main) Addr() string {
	if m.ln == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// Close stops taking requests, lets running work end within the grace
// period (or hands it back), and closes the store. It is safe to call more
// than once.
func (m *Main) Close() error {
	m.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), m.Config.Grace+5*time.Second)
		defer cancel()
		var errs []error
		for i := len(m.closers) - 1; i >= 0; i-- {
			errs = append(errs, m.closers[i](ctx))
		}
		m.closeErr = errors.Join(errs...)
		if m.closeErr == nil {
			m.Logger.Info("stopped")
		}
	})
	return m.closeErr
}

func (m *Main) onClose(fn func(ctx context.Context) error) { m.closers = append(m.closers, fn) }

func (m *Main) startHTTP(deps *deps) error {
	ln, err := net.Listen("tcp", m.Config.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", m.Config.Addr, err)
	}
	m.ln = ln
	open := new(atomic.Int64)
	m.server = m.newHTTPServer(deps.handler, open)
	if deps.endStreams != nil {
		m.server.RegisterOnShutdown(deps.endStreams)
	}
	go func() {
		if err := m.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Logger.Error("http server stopped", "err", err)
		}
	}()
	m.onClose(func(ctx context.Context) error {
		grace, cancel := context.WithTimeout(ctx, m.Config.Grace)
		defer cancel()
		return stopHTTP(ctx, m.server, open, grace, m.Logger)
	})
	if deps.lockAPI != nil {
		// Held locks and waiting acquires end as shutdown begins, so that
		// a long wait does not hold the shutdown up.
		m.server.RegisterOnShutdown(func() { _ = deps.lockAPI.Close() })
	}
	m.Logger.Info("serving", "addr", ln.Addr().String(), "mode", m.Mode, "workers", m.Config.Workers,
		"database", m.engine.name)
	return nil
}

// startDebug serves pprof on its own listener, never on the public one.
func (m *Main) startDebug() error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if m.metrics != nil {
		mux.Handle("GET /metrics", m.metrics.Handler()) // a worker process has no other listener
	}
	ln, err := net.Listen("tcp", m.Config.DebugAddr)
	if err != nil {
		return fmt.Errorf("listen on debug address %s: %w", m.Config.DebugAddr, err)
	}
	m.debug = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go m.debug.Serve(ln)
	m.onClose(func(ctx context.Context) error { return m.debug.Close() })
	m.Logger.Info("debug server", "addr", ln.Addr().String())
	return nil
}

// ensureFirstToken creates a token for the actor "local" when the store has
// none at all, writes it to DATA/token (0600) and prints it once. Of
// processes starting at once on one empty database, one creates it.
func (m *Main) ensureFirstToken(ctx context.Context) error {
	n, err := m.store.CountTokens(ctx)
	if err != nil || n > 0 {
		return err
	}
	token, err := httpapi.NewToken()
	if err != nil {
		return err
	}
	created, err := m.store.CreateTokenIfNone(ctx, "local", httpapi.HashToken(token))
	if err != nil || !created {
		return err
	}
	path := filepath.Join(m.Config.Data, "token")
	written, err := writeTokenFile(m.Config.Data, token)
	switch {
	case err != nil:
		// The token is stored (hashed) and printed below; only the file
		// copy is missing.
		m.Logger.Error("could not write the token file", "file", path, "err", err)
		fmt.Fprintf(m.Stdout, "Created a token for the actor \"local\" (shown only now; not written: %v):\n%s\n", err, token)
	case !written:
		// The file is another database's token (say, a SQLite server's,
		// and this is PostgreSQL): it stays as it is.
		m.Logger.Warn("the token file exists: the new token was not written", "file", path)
		fmt.Fprintf(m.Stdout, "Created a token for the actor \"local\" (shown only now; not written: %s already exists, perhaps for another database):\n%s\n", path, token)
	default:
		fmt.Fprintf(m.Stdout, "Created a token for the actor \"local\" (also in %s; shown only now):\n%s\n", path, token)
	}
	m.firstToken = token
	m.Logger.Info("created the first token", "actor", "local", "file", path, "written", written)
	return nil
}

// createToken makes a new token for actor and stores its hash.
func createToken(ctx context.Context, s store.Store, actor string) (string, error) {
	token, err := httpapi.NewToken()
	if err != nil {
		return "", err
	}
	if err := s.CreateToken(ctx, actor, httpapi.HashToken(token)); err != nil {
		return "", fmt.Errorf("store token: %w", err)
	}
	return token, nil
}

// validateActor: 1..100 characters of valid UTF-8, no control characters
// and no surrounding spaces.
func validateActor(actor string) error {
	switch {
	case actor == "":
		return errors.New("--actor is required")
	case !utf8.ValidString(actor) || utf8.RuneCountInString(actor) > 100:
		return errors.New("--actor must be 1..100 characters of UTF-8")
	}
	for _, r := range actor {
		if unicode.IsControl(r) {
			return errors.New("--actor must not contain control characters")
		}
	}
	if actor[0] == ' ' || actor[len(actor)-1] == ' ' {
		return errors.New("--actor must not start or end with a space")
	}
	return nil
}
