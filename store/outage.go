package store

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Outage turns a run of dependency faults into two log lines: one when the
// first fault is seen, one when a success follows (with how long it
// lasted and how many faults it counted), instead of a line per poll, per
// task or per request. Its methods are safe for concurrent use; the zero
// value is not usable: make one with NewOutage.
type Outage struct {
	log  *slog.Logger
	what string
	now  func() time.Time

	going atomic.Bool // the fast path of OK: no lock while all is well

	mu     sync.Mutex
	since  time.Time // zero while no outage is going on
	kind   FaultKind
	faults int
}

// NewOutage makes an Outage that logs on log; what says who saw it
// ("workers", "api").
func NewOutage(log *slog.Logger, what string) *Outage {
	return &Outage{log: log, what: what, now: time.Now}
}

// Fault records a fault; the first one of an outage is logged, at warning
// level, with its kind and error.
func (o *Outage) Fault(f *Fault) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.faults++
	if !o.since.IsZero() {
		return
	}
	o.since, o.kind = o.now(), f.Kind
	o.going.Store(true)
	o.log.Warn(f.Kind.Dependency()+" outage began: backing off until it passes", "seen_by", o.what, "kind", string(f.Kind), "err", f.Err)
}

// OK records a success: the end of the outage going on, if any, logged
// with its duration and the number of faults it counted.
func (o *Outage) OK() {
	if !o.going.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return
	}
	o.log.Info(o.kind.Dependency()+" outage ended", "seen_by", o.what, "kind", string(o.kind),
		"duration", o.now().Sub(o.since), "faults", o.faults)
	o.since, o.faults = time.Time{}, 0
	o.going.Store(false)
}

// ReadOK records a successful read: the end of an outage that reads feel
// too (the database unreachable, failing I/O), but not of one that only
// writes feel (busy, full, read-only), since reads go on during those.
func (o *Outage) ReadOK() {
	if !o.going.Load() {
		return
	}
	o.mu.Lock()
	kind := o.kind
	o.mu.Unlock()
	if kind == FaultUnreachable || kind == FaultIO {
		o.OK()
	}
}
