package locks

import (
	"container/heap"
	"context"
	"time"
)

// Lease is a held key, given to fn for as long as fn runs. Its methods are
// safe for concurrent use.
type Lease struct {
	key   string
	owner string
	fence int64
	t     target
	ttl   time.Duration
	q     *queue  // the key's queue in the engine, from enter to release
	e     *Engine // for Expires

	// fn's context, and the acquisitions': it ends when the caller's
	// does, when the lease is lost, at Close, or once fn has returned
	// (cause errReleased).
	ctx    context.Context
	cancel context.CancelCauseFunc
	// The context of the renewals and releases: the caller's values, not
	// its cancel; ended at Close after CloseGrace, or after the release.
	calls    context.Context
	endCalls context.CancelCauseFunc

	// The rest is the engine's, under its mutex.

	// expires is when the lease ends at the latest by this process's clock:
	// when the last successful acquisition or renewal was sent, plus the
	// TTL. The store started counting no earlier, so its own expiry is not
	// before this.
	expires time.Time

	prev, next *Lease // in the engine's list of leases
	linked     bool   // in that list

	due      time.Time // of the next renewal
	idx      int       // in the engine's renewal heap; -1 when not in it
	renewing bool      // a renewal is in flight
	stopped  bool      // fn returned: no more renewals
	cancelOp context.CancelFunc
	idle     chan struct{} // closed when the renewal in flight ends, after a stop
	lastErr  error         // of the last failed renewal
	lost     *LeaseLostError
}

// Key returns the key held.
func (l *Lease) Key() string { return l.key }

// Fence returns the lease's fence: a number larger than every fence the
// store handed out before for this key, across releases, expiries and
// restarts; at most MaxFence. Send it with every write that the lease
// protects and have the receiver refuse a fence lower than the highest it
// has seen: a holder that paused past its lease (and lost it without
// noticing in time) is then refused instead of overwriting the work of the
// next holder.
func (l *Lease) Fence() int64 { return l.fence }

// Expires returns when the lease ends at the latest unless renewed, by
// this process's clock: when the last successful acquisition or renewal
// was sent, plus the TTL. The store started counting no earlier, so its
// own expiry (Inspect's Holder.Expires, by the store's clock) is not
// before it. It moves on with each renewal while fn runs.
func (l *Lease) Expires() time.Time {
	l.e.mu.Lock()
	defer l.e.mu.Unlock()
	return l.expires
}

// Renewals. The engine keeps its running leases in a heap by the time of
// their next renewal and one timer for the earliest; the timer's callback
// starts a goroutine per lease due, which renews it once and puts it back
// in the heap. So a lease is renewed every ttl/3, one renewal at a time,
// and a hold that ends before its first renewal costs a heap push and
// remove, no timer and no goroutine.

// renewHeap orders leases by their next renewal.
type renewHeap []*Lease

func (h renewHeap) Len() int           { return len(h) }
func (h renewHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h renewHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *renewHeap) Push(x any) {
	l := x.(*Lease)
	l.idx = len(*h)
	*h = append(*h, l)
}
func (h *renewHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.idx = -1
	return l
}

// schedule queues l's next renewal at due. e.mu is held.
func (e *Engine) schedule(l *Lease, due time.Time) {
	l.due = due
	heap.Push(&e.renewals, l)
	if !e.armed || due.Before(e.armedAt) {
		e.arm(due)
	}
}

// arm sets the renewal timer to fire at due. e.mu is held.
func (e *Engine) arm(due time.Time) {
	d := time.Until(due)
	if e.renewTimer == nil {
		e.renewTimer = time.AfterFunc(d, e.renewDue)
	} else {
		e.renewTimer.Reset(d)
	}
	e.armedAt, e.armed = due, true
}

// renewDue runs when the renewal timer fires: it starts the renewals due
// and sets the timer for the next.
func (e *Engine) renewDue() {
	e.mu.Lock()
	e.armed = false
	t := time.Now()
	var due []*Lease
	for len(e.renewals) > 0 && !e.renewals[0].due.After(t) {
		l := heap.Pop(&e.renewals).(*Lease)
		l.renewing = true
		due = append(due, l)
	}
	if len(e.renewals) > 0 {
		e.arm(e.renewals[0].due)
	}
	e.mu.Unlock()
	for _, l := range due {
		go e.renew(l)
	}
}

// renew renews l once and schedules the next renewal, or declares the
// lease lost.
func (e *Engine) renew(l *Lease) {
	e.mu.Lock()
	if l.stopped {
		e.renewed(l)
		e.mu.Unlock()
		return
	}
	sent := time.Now()
	if !sent.Before(l.expires) {
		// Renewals failed until the lease ran out: a lease that ran out
		// is never renewed.
		e.lose(l, l.lastErr)
		e.renewed(l)
		e.mu.Unlock()
		return
	}
	ctx, cancel := context.WithDeadline(l.calls, l.expires)
	l.cancelOp = cancel
	e.mu.Unlock()

	ok, err := l.t.renew(ctx, e.store, l.key, l.owner, l.ttl)
	cancel()

	e.mu.Lock()
	defer e.mu.Unlock()
	l.cancelOp = nil
	if err == nil && !ok {
		e.lose(l, nil) // even after a stop: fn may have run past its lease
	}
	if l.stopped || l.lost != nil {
		e.renewed(l)
		return
	}
	l.renewing = false
	if err == nil {
		// The next renewal is due ttl/3 after this one was sent, however
		// long it took to answer.
		l.expires, l.lastErr = sent.Add(l.ttl), nil
		e.schedule(l, sent.Add(l.ttl/3))
		return
	}
	// Try again soon, but never past the lease's end: the check at the
	// top then declares it lost.
	l.lastErr = err
	e.schedule(l, time.Now().Add(min(max(l.ttl/10, time.Millisecond), time.Until(l.expires))))
}

// renewed ends a renewal that schedules no other. e.mu is held.
func (e *Engine) renewed(l *Lease) {
	l.renewing = false
	if l.idle != nil {
		close(l.idle)
		l.idle = nil
	}
}

// lose records the loss and ends fn's context with it. e.mu is held.
func (e *Engine) lose(l *Lease, err error) {
	if l.lost == nil {
		l.lost = &LeaseLostError{Key: l.key, Fence: l.fence, Err: err}
		l.cancel(l.lost)
	}
}

// stopRenewal ends l's renewals, waits for one in flight, and reports a
// loss.
func (e *Engine) stopRenewal(l *Lease) *LeaseLostError {
	e.mu.Lock()
	l.stopped = true
	if l.idx >= 0 {
		heap.Remove(&e.renewals, l.idx)
	}
	var idle chan struct{}
	if l.renewing {
		l.idle = make(chan struct{})
		idle = l.idle
		if l.cancelOp != nil {
			l.cancelOp()
		}
	}
	lost := l.lost
	e.mu.Unlock()
	if idle != nil {
		<-idle
		e.mu.Lock()
		lost = l.lost
		e.mu.Unlock()
	}
	return lost
}
