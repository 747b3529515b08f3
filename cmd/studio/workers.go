package main

import (
	"context"
	"fmt"

	"studio/leasequeue"
	"studio/worker"
)

// startWorkers starts this process's task workers: a pool running
// --workers (serve) or --concurrency (worker) tasks at once, none when it
// is 0. The catalog's max_concurrency limits go through the lock engine's
// semaphores (across processes with --lock-store db). The pool is stopped
// on Close, before the lock engine and the store close: running steps get
// --grace, then their leases are handed back.
func (m *Main) startWorkers(ctx context.Context, d *deps) error {
	cfg := m.Config
	if cfg.Workers == 0 {
		return nil
	}
	reg, gm := d.gens, d.genMetrics
	infos, err := d.catalog.Generators(ctx)
	if err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	limits := map[string]int{}
	for _, g := range infos {
		if g.MaxConcurrency > 0 {
			limits[g.ID] = g.MaxConcurrency
		}
	}
	var limiter worker.Limiter
	if len(limits) > 0 {
		limiter = worker.Semaphores(d.locks, limits)
	}
	wcfg := worker.Config{
		Options: leasequeue.Options{
			Concurrency: cfg.Workers,
			LeaseTTL:    cfg.LeaseTTL,
			MaxAttempts: cfg.MaxAttempts,
			RetryBase:   cfg.RetryBase,
			Grace:       cfg.Grace,
			Wake:        m.engine.wake,
			Logger:      m.Logger.With("component", "worker"),
		},
		Store:      m.store,
		Generators: reg,
		Blobs:      m.blobs,
		Batches:    m.store,
		Limiter:    limiter,
		Observe:    d.wrap.attempts(),
	}
	if gm != nil {
		wcfg.Spend = gm
	}
	wcfg.Breakers = d.breakers
	p, err := worker.New(wcfg)
	if err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	if err := p.Start(ctx); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	m.onClose(p.Stop)
	return nil
}
