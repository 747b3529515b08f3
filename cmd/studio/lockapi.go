package main

import (
	"context"
	"fmt"

	"studio/lockservice"
)

// buildLockAPI makes the lock service behind /v1/locks/ on the process's
// lock engine, with its metrics. Its leases end when the HTTP server starts
// shutting down (see startHTTP), so that waiting acquires answer 503 at
// once instead of holding the shutdown up.
func (m *Main) buildLockAPI(d *deps) (*lockservice.Service, error) {
	var svc *lockservice.Service
	observe, err := d.metrics.LockAPI(func() int { return svc.Held() })
	if err != nil {
		return nil, err
	}
	svc, err = lockservice.New(lockservice.Config{
		Engine:  d.locks,
		Observe: func(e lockservice.Event) { observe(e.Acquire, e.Ended) },
	})
	if err != nil {
		return nil, fmt.Errorf("lock api: %w", err)
	}
	m.onClose(func(context.Context) error { return svc.Close() })
	return svc, nil
}
