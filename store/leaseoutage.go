package store

import (
	"context"
	"errors"
	"sync"
	"time"
)

// LeaseOutage remembers, for one process's lease store, when its lease
// calls could not get through to the database: a fault, or a call that
// ran out of its time waiting (a renewal, whose time is what is left of
// the leases it renews). A lease that expired in such a window expired
// because its holder could not renew it, not because the holder crashed
// or hung: a claim that takes it back counts that try as handed back
// (released: not against the row's attempts), as a worker that meets a
// fault hands its task back. Tasks do not burn attempts on database
// faults.
//
// A window opens at the start of the first call that failed (Note) and
// closes when a lease write next commits (Wrote). A call that succeeded
// without writing proves nothing: a claim that found nothing to claim
// only read, and reads pass while another connection holds SQLite's
// write lock, so closing the window on it would leave a lease that
// expired later in the same outage counted against its task. The last
// few windows are kept (a lease that expired in one may be taken back a
// while after it closed). Their times are this process's clock; Windows
// turns them into the database's by their distance from now. The zero
// value is ready to use.
type LeaseOutage struct {
	mu      sync.Mutex
	windows []outageWindow // oldest first; the last may be open
}

// keptWindows is how many outage windows a LeaseOutage keeps.
const keptWindows = 16

// outageWindow is one window; until is zero while it is open.
type outageWindow struct {
	since, until time.Time
}

// Note records a lease call that began at start and ended with err; ctx
// is the call's context. A fault, or the call's own deadline passed,
// opens a window if none is open; anything else changes nothing.
func (o *LeaseOutage) Note(ctx context.Context, start time.Time, err error) {
	failed := FaultOf(err) != nil ||
		(errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded))
	if !failed {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open() {
		return
	}
	if len(o.windows) == keptWindows {
		o.windows = append(o.windows[:0], o.windows[1:]...)
	}
	o.windows = append(o.windows, outageWindow{since: start})
}

// Wrote records that a lease write committed: the database takes this
// process's writes again, and an open window closes now.
func (o *LeaseOutage) Wrote() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open() {
		o.windows[len(o.windows)-1].until = time.Now()
	}
}

// open says whether the last window is still open; o.mu is held.
func (o *LeaseOutage) open() bool {
	return len(o.windows) > 0 && o.windows[len(o.windows)-1].until.IsZero()
}

// Window is an outage window in the database's clock.
type Window struct {
	From, To time.Time
}

// Windows answers the outage windows in the database's clock, dbNow being
// its time now; one still open ends now.
func (o *LeaseOutage) Windows(dbNow time.Time) []Window {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.windows) == 0 {
		return nil
	}
	now := time.Now()
	out := make([]Window, len(o.windows))
	for i, w := range o.windows {
		until := w.until
		if until.IsZero() {
			until = now
		}
		out[i] = Window{From: dbNow.Add(-now.Sub(w.since)), To: dbNow.Add(-now.Sub(until))}
	}
	return out
}

// InOutage says whether t (the database's clock) falls in one of ws.
func InOutage(ws []Window, t time.Time) bool {
	for _, w := range ws {
		if !t.Before(w.From) && !t.After(w.To) {
			return true
		}
	}
	return false
}
