package locks

import (
	"context"
	"sync"
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
	base  context.Context // the hold's context without its cancel: values for store calls

	// expires is when the lease ends at the latest by this process's clock:
	// the time the acquisition was sent plus the TTL. The store started
	// counting no earlier, so its own expiry is not before this.
	expires time.Time

	// Set by the engine under its mutex.
	cancel context.CancelCauseFunc
	qk     queueKey
	q      *queue

	r renewal
}

// Key returns the key held.
func (l *Lease) Key() string { return l.key }

// Fence returns the lease's fence: a number larger than every fence the
// store handed out before for this key, across releases, expiries and
// restarts; at most MaxFence. Send it with every write that
// the lease protects and have the receiver refuse a fence lower than the
// highest it has seen: a holder that paused past its lease (and lost it
// without noticing in time) is then refused instead of overwriting the
// work of the next holder.
func (l *Lease) Fence() int64 { return l.fence }

// renewal renews one lease every ttl/3 on a timer, one renewal at a time:
// the next timer is armed only after a renewal returned. No goroutine
// exists between renewals.
type renewal struct {
	store  Store
	l      *Lease
	cancel context.CancelCauseFunc // ends fn's context when the lease is lost

	mu       sync.Mutex
	timer    *time.Timer
	expires  time.Time // local bound of the lease, see Lease.expires
	lastErr  error     // of the last failed renewal
	stopped  bool
	running  bool               // a renewal is in flight
	cancelOp context.CancelFunc // ends the renewal in flight
	idle     chan struct{}      // closed when the renewal in flight ends, after stop
	lost     *LeaseLostError
}

// startRenewal starts renewing l; the renewal lives inside the lease.
func startRenewal(s Store, l *Lease, cancel context.CancelCauseFunc) *renewal {
	r := &l.r
	r.mu.Lock()
	r.store, r.l, r.cancel, r.expires = s, l, cancel, l.expires
	r.timer = time.AfterFunc(l.ttl/3, r.fire)
	r.mu.Unlock()
	return r
}

func (r *renewal) fire() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	sent := time.Now()
	if !sent.Before(r.expires) {
		// Renewals failed until the lease ran out: a lease that ran out is
		// never renewed.
		r.lose(r.lastErr)
		r.mu.Unlock()
		return
	}
	ctx, cancel := context.WithDeadline(r.l.base, r.expires)
	r.running, r.cancelOp = true, cancel
	r.mu.Unlock()

	ok, err := r.l.t.renew(ctx, r.store, r.l.key, r.l.owner, r.l.ttl)
	cancel()

	r.mu.Lock()
	defer r.mu.Unlock()
	r.running, r.cancelOp = false, nil
	if r.stopped {
		if r.idle != nil {
			close(r.idle)
		}
		return
	}
	switch {
	case err == nil && ok:
		// The next renewal is due ttl/3 after this one was sent, however
		// long it took to answer.
		r.expires, r.lastErr = sent.Add(r.l.ttl), nil
		r.timer.Reset(time.Until(sent.Add(r.l.ttl / 3)))
	case err == nil:
		r.lose(nil)
	default:
		// Try again soon, but never past the lease's end: the check at the
		// top then declares it lost.
		r.lastErr = err
		r.timer.Reset(min(max(r.l.ttl/10, time.Millisecond), time.Until(r.expires)))
	}
}

// lose records the loss and ends fn's context with it. r.mu is held.
func (r *renewal) lose(err error) {
	r.lost = &LeaseLostError{Key: r.l.key, Fence: r.l.fence, Err: err}
	r.cancel(r.lost)
}

// stop ends renewals, waits for one in flight, and reports a loss.
func (r *renewal) stop() *LeaseLostError {
	r.mu.Lock()
	r.stopped = true
	r.timer.Stop()
	var idle chan struct{}
	if r.running {
		r.idle = make(chan struct{})
		idle = r.idle
		r.cancelOp()
	}
	lost := r.lost
	r.mu.Unlock()
	if idle != nil {
		<-idle
	}
	return lost
}
