package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"studio/intent"
	"studio/leasequeue"
	"studio/store"
	"studio/wake"
)

// Outcome is how one try of an item ended, for Config.Observe.
type Outcome string

// Outcomes passed to Config.Observe, one per try of an item.
const (
	OutcomeSucceeded Outcome = "succeeded" // the item is done
	OutcomeRetry     Outcome = "retry"     // it failed and waits for another attempt
	OutcomeFailed    Outcome = "failed"    // it failed for good
	OutcomeLost      Outcome = "lost"      // the lease was lost: nothing recorded
	OutcomeReleased  Outcome = "released"  // handed back by a stopping runner
)

// Store is what a Runner needs of the store: store.PublicationStore has it.
type Store interface {
	store.LeaseStore
	ClaimItems(ctx context.Context, p store.ClaimParams) ([]store.ClaimedItem, error)
}

// Config configures a Runner. Zero fields take the defaults of
// leasequeue.Options.
type Config struct {
	// Options are the runner's: how many items run at once, the lease
	// length, the attempts and their retry waits, the grace of a stop (the
	// items still running after it are canceled and their leases handed
	// back), the polls, the logger and the owner.
	leasequeue.Options
	Store Store
	// Channels carry items out, by channel name. An item of a channel
	// missing here fails its attempt (and is retried after a backoff, when
	// a runner that has the channel may take it).
	Channels map[string]Channel
	// Observe, when set, is told the outcome of every try (for metrics).
	Observe func(channel string, outcome Outcome)
}

func (c Config) withDefaults() (Config, error) {
	if c.Store == nil || len(c.Channels) == 0 {
		return c, errors.New("new publish runner: a Store and at least one channel are required")
	}
	o, err := c.Options.WithDefaults("publisher")
	if err != nil {
		return c, fmt.Errorf("new publish runner: %w", err)
	}
	c.Options = o
	return c, nil
}

// Runner carries out publication items. Start begins claiming; Stop stops
// gracefully. Both may be called any number of times, in any order; a
// stopped runner can be started again. The claiming, renewing and stopping
// are a leasequeue.Runner's; Runner is its handler of publication items.
type Runner struct {
	cfg    Config
	runner *leasequeue.Runner[store.ClaimedItem]
}

// items is the runner's handler of the lease runner.
type items struct {
	cfg         Config
	log         *slog.Logger
	completions *leasequeue.Batcher[store.Completion, store.CompletionResult]
}

// New checks cfg and returns a stopped runner.
func New(cfg Config) (*Runner, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &items{
		cfg:         c,
		log:         c.Logger.With("owner", c.Owner),
		completions: leasequeue.NewBatcher(leasequeue.MaxHeld, c.Store.CompleteLeases),
	}
	runnerOptions := c.Options
	runnerOptions.Logger = h.log
	r, err := leasequeue.New(leasequeue.Config{
		Options: runnerOptions,
		Leases:  c.Store,
		Loops:   []func(context.Context){h.completions.Loop},
		WakeOn:  wake.Items,
	}, h)
	if err != nil {
		return nil, fmt.Errorf("new publish runner: %w", err)
	}
	return &Runner{cfg: c, runner: r}, nil
}

// Owner is the name on this runner's leases.
func (r *Runner) Owner() string { return r.cfg.Owner }

// Start begins claiming and running items in goroutines that live until
// Stop; ctx only carries values. Starting a started runner does nothing;
// starting one that is stopping waits for the stop to end (or for ctx).
func (r *Runner) Start(ctx context.Context) error { return r.runner.Start(ctx) }

// Stop stops claiming, lets running items end within Grace (or until ctx
// ends), then cancels the rest and hands their leases back, and returns
// once every goroutine of the runner has ended. Concurrent calls all wait
// for the one stop.
func (r *Runner) Stop(ctx context.Context) { r.runner.Stop(ctx) }

// Claim leases up to limit items, waiting at most a third of the lease for
// the database's locks (tasks.Claim in package worker says why).
func (h *items) Claim(ctx context.Context, owner string, limit int, ttl time.Duration) ([]store.ClaimedItem, error) {
	return h.cfg.Store.ClaimItems(store.WithWait(ctx, ttl/3), store.ClaimParams{
		Owner: owner, Limit: limit, TTL: ttl, MaxAttempts: h.cfg.MaxAttempts,
	})
}

// Lease is the item's lease.
func (h *items) Lease(it store.ClaimedItem) store.Lease { return it.Lease }

// Run hands the item to its channel and records how it ended, with its
// fence.
func (h *items) Run(ctx context.Context, sess *leasequeue.Session, it store.ClaimedItem) {
	log := h.log.With("item", it.Lease.ID, "publication", it.PublicationID, "channel", it.Channel, "attempt", it.Attempt)
	err := h.publish(ctx, it)
	lost := errors.Is(context.Cause(ctx), store.ErrLeaseLost)
	// The store calls below must run even when the item was canceled.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.LeaseTTL)
	defer cancel()
	var outcome Outcome
	switch {
	case lost:
		outcome = OutcomeLost
	case err == nil:
		res, cerr := h.completions.Do(store.Completion{Lease: it.Lease})
		lerr := res.Err
		switch {
		case sess.Fault(cerr):
			return // logged once per outage; the lease will expire and the item run again
		case cerr != nil:
			log.Error("record a published item", "err", cerr)
			return
		case lerr != nil:
			outcome = OutcomeLost
		default:
			outcome = OutcomeSucceeded
			log.Debug("item published")
		}
	case errors.Is(context.Cause(ctx), leasequeue.ErrStopping), sess.Fault(err):
		// Stopping, or the database (the disk) failed and not the item:
		// hand it back, which does not count against its attempts.
		errs, rerr := h.cfg.Store.ReleaseLeases(sctx, []store.Lease{it.Lease})
		switch {
		case sess.Fault(rerr):
			return // logged once per outage; the lease will expire
		case rerr != nil:
			log.Error("hand back an item", "err", rerr)
			return
		case errs[0] != nil:
			outcome = OutcomeLost
		default:
			outcome = OutcomeReleased
		}
	default:
		// No sooner than the receiver said (429, 503 with Retry-After).
		backoff := leasequeue.RetryWait(h.cfg.RetryBase, h.cfg.RetryMax, it.Attempt, mrand.Float64(), err)
		state, ferr := h.cfg.Store.FailLease(sctx, store.Failure{Lease: it.Lease, Error: err.Error(),
			Permanent: IsPermanent(err), MaxAttempts: h.cfg.MaxAttempts, Backoff: backoff})
		switch {
		case errors.Is(ferr, store.ErrLeaseLost):
			outcome = OutcomeLost
		case sess.Fault(ferr):
			return // logged once per outage; the lease will expire and the item run again
		case ferr != nil:
			log.Error("record a failed item", "err", ferr, "failure", err)
			return
		case state == intent.StateFailed:
			outcome = OutcomeFailed
			log.Warn("item failed", "err", err)
		default:
			outcome = OutcomeRetry
			log.Info("item failed; will retry", "err", err, "backoff", backoff.String())
		}
	}
	if outcome == OutcomeLost {
		log.Warn("item lease lost; nothing recorded")
	}
	if h.cfg.Observe != nil {
		h.cfg.Observe(it.Channel, outcome)
	}
}

// publish runs the item's channel, turning a panic into an error.
func (h *items) publish(ctx context.Context, it store.ClaimedItem) (err error) {
	ch := h.cfg.Channels[it.Channel]
	if ch == nil {
		return fmt.Errorf("no %s channel is configured on this worker", it.Channel)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("channel %s panicked: %v", it.Channel, p)
		}
	}()
	return ch.Publish(ctx, it)
}
