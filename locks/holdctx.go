package locks

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// holdCtx is a hold's context: fn's, and the acquisitions' before it. It
// ends when its parent (the caller's context) ends or when the engine
// cancels it (a lost lease, Close, the release), and context.Cause tells
// which: it behaves as context.WithCancelCause(parent).
//
// It makes that context lazily. Until someone asks for its Done channel,
// or for a value once it has ended, it is a few fields inside the Lease:
// Err looks at the parent, cancel records the cause, and nothing is
// allocated or registered with the parent. An uncontended hold whose fn
// never waits on its context (the common short critical section) so pays
// for no context at all; one that does pays what WithCancelCause costs.
//
// Once made, the real context (inner) answers everything. It is made
// already ended when the hold ended first, with the same error and cause:
// from the parent when the parent ended first (WithCancelCause of an ended
// parent ends at once, with the parent's error and cause), else detached
// from the parent (context.WithoutCancel) and canceled with the cause.
// Before it exists, Value answers the parent's values while the context
// is live; the context package looks for a context's cancelation through
// Value only after Done (to register a child) or after Err reported the
// end (context.Cause), and both find inner.
type holdCtx struct {
	parent context.Context

	// state is live, ended (without inner) or made (inner answers from
	// then on). It is written under mu, after what it announces, and read
	// without it on the fast paths: once made, inner and stop never change.
	state    atomic.Uint32
	byParent bool // ended because the parent did: Err is the parent's
	mu       sync.Mutex
	cause    error           // why it ended, while not made
	inner    context.Context // the real one, once made
	stop     context.CancelCauseFunc
}

// The states of a holdCtx.
const (
	hcLive uint32 = iota
	hcEnded
	hcMade
)

func (c *holdCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

func (c *holdCtx) Done() <-chan struct{} {
	if c.state.Load() == hcMade {
		return c.inner.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.innerLocked().Done()
}

func (c *holdCtx) Err() error {
	switch c.state.Load() {
	case hcMade:
		return c.inner.Err()
	case hcLive:
		if c.parent.Err() == nil {
			return nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Load() == hcMade {
		return c.inner.Err()
	}
	return c.endedLocked()
}

func (c *holdCtx) Value(key any) any {
	switch c.state.Load() {
	case hcMade:
		return c.inner.Value(key)
	case hcLive:
		if c.parent.Err() == nil {
			return c.parent.Value(key)
		}
	}
	// Ended: from now on context.Cause may ask for the cancelation, which
	// only inner has.
	c.mu.Lock()
	inner := c.innerLocked()
	c.mu.Unlock()
	return inner.Value(key)
}

func (c *holdCtx) String() string { return "locks.Hold context" }

// cancel ends the context with cause, unless it has ended already.
func (c *holdCtx) cancel(cause error) {
	if cause == nil {
		cause = context.Canceled
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Load() == hcMade {
		c.stop(cause)
		return
	}
	if c.endedLocked() == nil {
		c.cause = cause
		c.state.Store(hcEnded)
	}
}

// endedLocked answers how the context ended, nil while it is live; it
// takes the parent's end as its own the first time it sees it. Not for a
// made context. c.mu is held.
func (c *holdCtx) endedLocked() error {
	if c.state.Load() == hcLive {
		if c.parent.Err() == nil {
			return nil
		}
		c.cause, c.byParent = context.Cause(c.parent), true
		c.state.Store(hcEnded)
	}
	if c.byParent {
		return c.parent.Err() // once ended, a context's Err stays
	}
	return context.Canceled
}

// innerLocked makes the real context if it does not exist yet, ended if
// this one has. c.mu is held.
func (c *holdCtx) innerLocked() context.Context {
	if c.state.Load() == hcMade {
		return c.inner
	}
	if c.endedLocked() != nil && !c.byParent {
		c.inner, c.stop = context.WithCancelCause(context.WithoutCancel(c.parent))
		c.stop(c.cause)
	} else {
		// Live, or ended with the parent: then WithCancelCause ends at
		// once, with the parent's error and cause.
		c.inner, c.stop = context.WithCancelCause(c.parent)
	}
	c.cause = nil // inner has it
	c.state.Store(hcMade)
	return c.inner
}
