package publish

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"studio/intent"
	"studio/leasequeue"
	"studio/store"
	"studio/wake"
)

// Defaults of Config.
const (
	DefaultConcurrency = leasequeue.DefaultConcurrency
	DefaultLeaseTTL    = leasequeue.DefaultLeaseTTL
	DefaultMaxAttempts = 5
	DefaultRetryBase   = 500 * time.Millisecond
	DefaultRetryMax    = time.Minute
	DefaultGrace       = leasequeue.DefaultGrace
	DefaultPollMin     = leasequeue.DefaultPollMin
	DefaultPollMax     = leasequeue.DefaultPollMax
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
	ClaimItems(ctx context.Context, p store.ClaimParams) ([]store.ClaimedItem, error)
	RenewItemLeases(ctx context.Context, p store.ItemRenewParams) (store.ItemRenewResult, error)
	CompleteItems(ctx context.Context, leases []store.ItemLease) ([]error, error)
	FailItem(ctx context.Context, f store.ItemFailure) (intent.State, error)
	ReleaseItems(ctx context.Context, leases []store.ItemLease) ([]error, error)
}

// Config configures a Runner. Zero fields take the defaults above.
type Config struct {
	Store Store
	// Channels carry items out, by channel name. An item of a channel
	// missing here fails its attempt (and is retried after a backoff, when
	// a runner that has the channel may take it).
	Channels map[string]Channel
	// Concurrency is how many items run at once.
	Concurrency int
	// LeaseTTL is the length of an item lease; it is renewed every third.
	LeaseTTL time.Duration
	// MaxAttempts is how many failed tries make an item failed.
	MaxAttempts int
	// RetryBase is the wait after a first failure; it doubles per attempt,
	// with jitter, up to RetryMax.
	RetryBase, RetryMax time.Duration
	// Grace is how long Stop lets running items end before it cancels
	// them and hands their leases back.
	Grace time.Duration
	// PollMin and PollMax bound the wait between claims that found nothing.
	PollMin, PollMax time.Duration
	// Logger gets what the runner does; nil discards.
	Logger *slog.Logger
	// Owner names this runner's leases; random by default.
	Owner string
	// Observe, when set, is told the outcome of every try (for metrics).
	Observe func(channel string, outcome Outcome)
	// Wake, when set, is the store's hub: the runner claims as soon as a
	// commit makes items claimable (wake.Items), not at its next poll.
	Wake *wake.Hub
}

func (c Config) withDefaults() (Config, error) {
	if c.Store == nil || len(c.Channels) == 0 {
		return c, errors.New("new publish runner: a Store and at least one channel are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	def(&c.LeaseTTL, DefaultLeaseTTL)
	def(&c.RetryBase, DefaultRetryBase)
	def(&c.RetryMax, DefaultRetryMax)
	def(&c.Grace, DefaultGrace)
	def(&c.PollMin, DefaultPollMin)
	if c.Wake == nil {
		def(&c.PollMax, DefaultPollMax)
	}
	if c.PollMax > 0 && c.PollMax < c.PollMin {
		c.PollMax = c.PollMin
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Owner == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return c, fmt.Errorf("new publish runner: %w", err)
		}
		c.Owner = "publisher-" + hex.EncodeToString(b[:])
	}
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
	completions *leasequeue.Batcher[store.ItemLease, error]
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
		completions: leasequeue.NewBatcher(leasequeue.MaxHeld, c.Store.CompleteItems),
	}
	r, err := leasequeue.New(leasequeue.Config{
		Owner:       c.Owner,
		Concurrency: c.Concurrency,
		LeaseTTL:    c.LeaseTTL,
		Grace:       c.Grace,
		PollMin:     c.PollMin,
		PollMax:     c.PollMax,
		Loops:       []func(context.Context){h.completions.Loop},
		Logger:      h.log,
		Wake:        c.Wake,
		WakeOn:      wake.Items,
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

// Claim leases up to limit items.
func (h *items) Claim(ctx context.Context, owner string, limit int, ttl time.Duration) ([]store.ClaimedItem, error) {
	return h.cfg.Store.ClaimItems(ctx, store.ClaimParams{
		Owner: owner, Limit: limit, TTL: ttl, MaxAttempts: h.cfg.MaxAttempts,
	})
}

// Key is the item's id.
func (h *items) Key(it store.ClaimedItem) string { return it.ItemID }

// Renew renews the items' leases in one call; items have no parent to
// cancel them.
func (h *items) Renew(ctx context.Context, owner string, its []store.ClaimedItem, ttl time.Duration) (lost, canceled []string, err error) {
	leases := make([]store.ItemLease, len(its))
	for i, it := range its {
		leases[i] = it.ItemLease
	}
	res, err := h.cfg.Store.RenewItemLeases(ctx, store.ItemRenewParams{Owner: owner, Leases: leases, TTL: ttl})
	return res.Lost, nil, err
}

// Run hands the item to its channel and records how it ended, with its
// fence.
func (h *items) Run(ctx context.Context, sess *leasequeue.Session, it store.ClaimedItem) {
	log := h.log.With("item", it.ItemID, "publication", it.PublicationID, "channel", it.Channel, "attempt", it.Attempt)
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
		lerr, cerr := h.completions.Do(it.ItemLease)
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
		errs, rerr := h.cfg.Store.ReleaseItems(sctx, []store.ItemLease{it.ItemLease})
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
		state, ferr := h.cfg.Store.FailItem(sctx, store.ItemFailure{ItemLease: it.ItemLease, Error: err.Error(),
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
