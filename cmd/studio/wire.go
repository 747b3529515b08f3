package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"studio/generator"
	"studio/httpapi"
	"studio/intent"
	"studio/internal/diskfree"
	"studio/locks"
	"studio/locks/redislock"
	"studio/lockservice"
	"studio/metrics"
	"studio/planner"
	"studio/web"
	"studio/worker"
)

// deps are the objects a process is wired from: config to objects, nothing
// more.
type deps struct {
	catalog *planner.Static
	locks   *locks.Engine
	service *intent.Service
	metrics *metrics.Metrics
	wrap    wrappers
	pubs    *pubDeps
	lockAPI *lockservice.Service
	handler http.Handler
	// gens are the catalog's generators, genMetrics their metrics (nil
	// without), breakers the remote ones' circuit breakers.
	gens       *generator.Registry
	genMetrics *metrics.Generators
	breakers   *worker.Breakers
	// endStreams ends the event streams when the server shuts down.
	endStreams func()
}

// build makes, in this order, the catalog, the asset store, the lock
// engine, the metrics, the publication channels and uploads, the intent
// service and (for serve) the HTTP handler.
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
	blobs, err := m.engine.blobs()
	if err != nil {
		return nil, err
	}
	m.blobs = blobs
	lockStore, closeLockStore, err := m.lockStore()
	if err != nil {
		return nil, err
	}
	m.onClose(func(context.Context) error { return closeLockStore() })
	d.locks = locks.New(lockStore)
	m.onClose(func(context.Context) error { return d.locks.Close() })

	d.metrics = metrics.New()
	if err := m.engine.collect(d.metrics); err != nil {
		return nil, err
	}
	if cfg.Data != "" {
		if err := d.metrics.FreeBytes(func() (uint64, error) { return diskfree.Bytes(cfg.Data) }); err != nil {
			return nil, err
		}
	}
	m.metrics = d.metrics
	removed, err := d.metrics.Retention(m.store.Usage)
	if err != nil {
		return nil, err
	}
	m.store = countedDeletes{m.store, removed}
	d.wrap = wrappers{log: m.Logger, metrics: d.metrics, locks: d.locks}
	if d.gens, d.genMetrics, err = m.generators(d); err != nil {
		return nil, err
	}
	d.breakers = worker.NewBreakers(d.gens, worker.BreakerConfig{Logger: m.Logger.With("component", "generators")})
	probeCtx, stopProbe := context.WithCancel(context.Background())
	m.onClose(func(context.Context) error { stopProbe(); return nil })
	go d.breakers.ProbeAll(probeCtx)

	if d.pubs, err = m.buildPublications(d); err != nil {
		return nil, err
	}
	p := planner.New(d.catalog)
	p.MaxTasks = cfg.MaxBatchTasks
	d.service = &intent.Service{
		Store:        d.wrap.intentStore(m.store),
		Planner:      d.wrap.planner(p),
		Locker:       d.wrap.locker("intent"),
		Observe:      d.metrics.Intent,
		Publications: m.store,
		Channels:     d.pubs.channelNames(),
	}
	if m.Mode == modeServe {
		if d.lockAPI, err = m.buildLockAPI(d); err != nil {
			return nil, err
		}
	}
	if m.Mode != modeServe {
		return d, nil
	}
	cursorKey, err := m.store.CursorKey(ctx)
	if err != nil {
		return nil, err
	}
	uploadDir, err := m.uploadDir()
	if err != nil {
		return nil, err
	}
	var presign httpapi.Presigner
	if cfg.AssetsRedirect > 0 {
		p, ok := m.blobs.(httpapi.Presigner)
		if !ok {
			return nil, errors.New("--assets-redirect needs --assets s3://BUCKET/PREFIX")
		}
		presign = p
	}
	srv, err := httpapi.New(httpapi.Config{
		CursorKey:    cursorKey,
		Generations:  d.wrap.generations(d.service),
		Store:        m.store,
		Blobs:        m.blobs,
		Presign:      presign,
		PresignTTL:   cfg.AssetsRedirect,
		Uploads:      d.pubs.uploads,
		Publications: d.service,
		Locks:        d.lockAPI,
		Logger:       m.Logger,
		Metrics:      d.metrics.Handler(),
		Observe:      d.wrap.requests(),
		Limits:       cfg.httpLimits(),
		DataDir:      cfg.Data,
		UploadDir:    uploadDir,
		Catalogs:     catalogView{d.catalog, p.Limit(), d.service.Channels, d.breakers},
		GeneratorHealth: func() []httpapi.GeneratorStatus {
			var out []httpapi.GeneratorStatus
			for _, h := range d.breakers.Health() {
				out = append(out, httpapi.GeneratorStatus{ID: h.ID, State: h.State, Since: h.Since, Error: h.Error})
			}
			return out
		},
		UI: web.Handler(),
	})
	if err != nil {
		return nil, err
	}
	d.handler = srv.Handler()
	d.endStreams = srv.EndStreams
	return d, nil
}

// lockStore is the store behind the lock engine: in-process memory, the
// database, or a Redis, so that locks hold across every process sharing
// it.
func (m *Main) lockStore() (locks.Store, func() error, error) {
	return openLockStore(m.Config.lockStore(), m.engine)
}

// openLockStore opens the lock store of kind ("memory", "db" on e, or a
// redis:// or rediss:// URL) and answers what closes it.
func openLockStore(kind string, e *engine) (locks.Store, func() error, error) {
	nothing := func() error { return nil }
	switch {
	case kind == "memory":
		return locks.NewMemoryStore(), nothing, nil
	case isRedisURL(kind):
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rs, err := redislock.Open(ctx, kind)
		if err != nil {
			return nil, nil, fmt.Errorf("open the Redis lock store: %w", err)
		}
		return redisFaults{rs}, rs.Close, nil
	}
	ls, err := e.lockStore(context.Background())
	return ls, nothing, err
}
