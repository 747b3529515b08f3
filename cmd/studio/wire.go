package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"studio/httpapi"
	"studio/intent"
	"studio/locks"
	"studio/metrics"
	"studio/planner"
	"studio/store/postgres"
	"studio/store/sqlite"
	"studio/web"
)

// deps are the objects a process is wired from: config to objects, nothing
// more.
type deps struct {
	catalog *planner.Static
	locks   *locks.Engine
	service *intent.Service
	metrics *metrics.Metrics
	pubs    *pubDeps
	handler http.Handler
	// endStreams ends the event streams when the server shuts down.
	endStreams func()
}

// build makes the catalog, the lock engine, the intent service and (for
// serve) the HTTP handler.
func (m *Main) build(ctx context.Context) (*deps, error) {
	cfg := m.Config
	d := &deps{}
	if cfg.Catalog != "" {
		c, err := planner.LoadCatalog(cfg.Catalog)
		if err != nil {
			return nil, fmt.Errorf("load catalog: %w", err)
		}
		d.catalog = c
	} else {
		d.catalog = planner.EmbeddedCatalog()
	}
	lockStore, err := m.lockStore()
	if err != nil {
		return nil, err
	}
	d.locks = locks.New(lockStore)
	m.onClose(func(context.Context) error { return d.locks.Close() })

	if d.metrics, err = m.newMetrics(); err != nil {
		return nil, err
	}
	m.metrics = d.metrics

	p := planner.New(d.catalog)
	p.MaxTasks = cfg.MaxBatchTasks
	d.service = &intent.Service{
		Store:   d.metrics.IntentStore(m.store),
		Planner: d.metrics.Planner(loggedPlanner{p, m.Logger}),
		Locker:  d.metrics.Locker("intent", engineLocker{d.locks}),
		Observe: d.metrics.Intent,
	}
	if d.pubs, err = m.buildPublications(d); err != nil {
		return nil, err
	}
	if m.Mode != modeServe {
		return d, nil
	}
	srv, err := httpapi.New(httpapi.Config{
		Generations:  loggedService{d.service, m.Logger},
		Store:        m.store,
		Blobs:        m.blobs,
		Uploads:      d.pubs.uploads,
		Publications: d.service,
		Logger:       m.Logger,
		Metrics:      d.metrics.Handler(),
		Observe:      observeRequests(d.metrics),
		Catalogs:     catalogView{d.catalog, cfg.MaxBatchTasks, d.service.Channels},
		UI:           web.Handler(),
	})
	if err != nil {
		return nil, err
	}
	d.handler = srv.Handler()
	d.endStreams = srv.EndStreams
	return d, nil
}

// lockStore is the store behind the lock engine: in-process memory, or the
// database so that locks hold across every process sharing it.
func (m *Main) lockStore() (locks.Store, error) {
	if m.Config.lockStore() == "memory" {
		return locks.NewMemoryStore(), nil
	}
	switch s := m.store.(type) {
	case *sqlite.Store:
		return sqlite.NewLockStore(s), nil
	case *postgres.Store:
		return postgres.NewLockStore(s), nil
	default:
		return nil, fmt.Errorf("--lock-store db is not available for %T", m.store)
	}
}

// engineLocker adapts the lock engine to the intent service's Locker port.
type engineLocker struct{ e *locks.Engine }

func (l engineLocker) Hold(ctx context.Context, key string, fn func(context.Context) error) error {
	return l.e.Hold(ctx, key, func(ctx context.Context, _ *locks.Lease) error { return fn(ctx) })
}

// loggedPlanner logs every plan made (at debug level): how many tasks, how
// long it took.
type loggedPlanner struct {
	p   intent.Planner
	log *slog.Logger
}

func (l loggedPlanner) PlanGeneration(ctx context.Context, actor string, in *intent.GenerationInput) ([]intent.PlannedTask, error) {
	start := time.Now()
	tasks, err := l.p.PlanGeneration(ctx, actor, in)
	l.log.Debug("planned", "actor", actor, "tasks", len(tasks), "ok", err == nil, "duration_ms", msSince(start))
	return tasks, err
}

// msSince is the time since start in milliseconds, for log lines.
func msSince(start time.Time) float64 {
	return float64(time.Since(start).Microseconds()) / 1000
}
