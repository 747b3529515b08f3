package leasequeue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"studio/store"
	"studio/wake"
)

// Causes with which a Runner ends an item's context; a handler tells them
// apart with context.Cause.
var (
	// ErrCanceled: a renewal said the item's parent (a batch) was asked to
	// cancel. The lease was renewed; the handler stops the item and hands
	// the lease back, and the store records the cancel.
	ErrCanceled = errors.New("canceled with its parent")
	// ErrStopping: the runner is stopping and the grace period ran out.
	ErrStopping = errors.New("the runner is stopping")
)

// A lease the runner finds lost (a renewal answered so, or none confirmed
// it before its deadline) ends the item's context with store.ErrLeaseLost,
// the error every fenced write of the store answers: one error for one
// condition, whoever sees it first.

// Handler is what a Runner runs, for one kind of lease: how to claim
// items and carry one out. The runner renews the leases itself
// (Config.Leases).
type Handler[T any] interface {
	// Claim leases up to limit items to owner for ttl.
	Claim(ctx context.Context, owner string, limit int, ttl time.Duration) ([]T, error)
	// Lease is the item's lease (its id names it among those the runner
	// holds).
	Lease(item T) store.Lease
	// Run carries item out and records how it ended. ctx ends early, with
	// its cause, when the lease is lost (store.ErrLeaseLost), the parent is
	// canceled (ErrCanceled) or the grace of a stop ran out (ErrStopping).
	Run(ctx context.Context, s *Session, item T)
}

// Parenter is a Handler whose items belong to parents that can be asked
// to cancel (a task's batch). With Options.Wake, a wake.Cancel event that
// names a parent ends the contexts of its items the runner holds at once,
// with ErrCanceled; one of any parent makes the runner renew every lease
// at once, and the renewal says which were canceled.
type Parenter[T any] interface {
	// Parent names the item's parent, as wake.Cancel events name it.
	Parent(item T) string
}

// Renewer renews leases: store.LeaseStore has it.
type Renewer interface {
	RenewLeases(ctx context.Context, p store.RenewParams) (store.RenewResult, error)
}

// Config configures a Runner. Zero fields take the defaults above.
type Config struct {
	// Options are the leases' owner, length and claims; MaxAttempts and
	// the retry waits are the handler's.
	Options
	// Leases renews the leases the runner holds (required).
	Leases Renewer
	// ClaimAhead makes the runner lease more items than it runs: about
	// LookAhead of work more (by the moving average of run times the
	// handler reports with Session.Observe), at least Concurrency and at
	// most MaxHeld in all, claiming again once half of that is free, so
	// that quick items are claimed in large batches. The handler then
	// bounds how many run at once itself. Without it the runner holds at
	// most Concurrency items and claims whenever one is free.
	ClaimAhead bool
	// Loops run beside the items for each Start..Stop, until every item of
	// it has ended (batch writers, sweeps); their context then ends.
	Loops []func(ctx context.Context)
	// OnStart and OnStop, when set, are called when a Start starts the
	// runner and when a Stop has stopped it (for log lines).
	OnStart, OnStop func()
	// WakeOn are the kinds of Options.Wake's events that mean work to
	// claim (due now, or at their At).
	WakeOn wake.Kind
}

// Claiming ahead (Config.ClaimAhead).
const (
	LookAhead = 50 * time.Millisecond
	MaxHeld   = 512
)

func (c Config) withDefaults() (Config, error) {
	if c.Owner == "" || c.Leases == nil {
		return c, errors.New("new lease runner: an Owner and Leases are required")
	}
	o, err := c.Options.WithDefaults("")
	if err != nil {
		return c, fmt.Errorf("new lease runner: %w", err)
	}
	c.Options = o
	return c, nil
}

// Runner claims items under leases, runs each with its Handler, renews the
// leases while they run and stops gracefully. Start and Stop are safe to
// call any number of times and in any order; a stopped Runner can be
// started again.
type Runner[T any] struct {
	cfg Config
	h   Handler[T]

	mu  sync.Mutex
	cur *session[T] // nil while stopped

	stats stats
}

// stats counts a runner's claims, over all its sessions.
type stats struct {
	claims, empty atomic.Int64
}

// Stats are counts of a runner's claims since it was made.
type Stats struct {
	// Claims counts the calls of Handler.Claim; Empty those that found
	// nothing (an idle poll, or a wake-up whose work another took).
	Claims, Empty int64
}

// Stats answers the runner's counts so far.
func (r *Runner[T]) Stats() Stats {
	return Stats{Claims: r.stats.claims.Load(), Empty: r.stats.empty.Load()}
}

// New checks cfg and returns a stopped runner of h.
func New[T any](cfg Config, h Handler[T]) (*Runner[T], error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Runner[T]{cfg: c, h: h}, nil
}

// Start begins claiming and running items, in goroutines that live until
// Stop (ctx only carries values). Starting a started runner does nothing;
// starting one that is stopping waits for the stop to end, then starts.
func (r *Runner[T]) Start(ctx context.Context) error {
	for {
		r.mu.Lock()
		cur := r.cur
		if cur == nil {
			r.cur = newSession(context.WithoutCancel(ctx), r.cfg, r.h, &r.stats)
			r.cur.start()
			r.mu.Unlock()
			return nil
		}
		r.mu.Unlock()
		if !cur.Stopping() {
			return nil
		}
		select {
		case <-cur.done:
			r.mu.Lock()
			if r.cur == cur {
				r.cur = nil
			}
			r.mu.Unlock()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Stop stops claiming, lets running items end within Grace (or until ctx
// ends), then ends the rest's contexts with ErrStopping, and returns once
// every item, loop and renewal of the runner has ended. Stopping a stopped
// runner does nothing; concurrent calls all wait for the one stop.
func (r *Runner[T]) Stop(ctx context.Context) {
	r.mu.Lock()
	cur := r.cur
	r.mu.Unlock()
	if cur == nil {
		return
	}
	cur.stop(ctx)
	r.mu.Lock()
	if r.cur == cur {
		r.cur = nil
	}
	r.mu.Unlock()
}
