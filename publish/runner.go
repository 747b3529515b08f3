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
	"sync"
	"time"

	"studio/intent"
	"studio/store"
	"studio/worker"
)

// Defaults of Config.
const (
	DefaultConcurrency = 4
	DefaultLeaseTTL    = 30 * time.Second
	DefaultMaxAttempts = 5
	DefaultRetryBase   = 500 * time.Millisecond
	DefaultRetryMax    = time.Minute
	DefaultGrace       = 10 * time.Second
	DefaultPollMin     = 20 * time.Millisecond
	DefaultPollMax     = time.Second
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
	def(&c.PollMax, DefaultPollMax)
	if c.PollMax < c.PollMin {
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
// stopped runner can be started again.
type Runner struct {
	cfg Config
	mu  sync.Mutex
	cur *run
}

// New checks cfg and returns a stopped runner.
func New(cfg Config) (*Runner, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Runner{cfg: c}, nil
}

// Owner is the name on this runner's leases.
func (r *Runner) Owner() string { return r.cfg.Owner }

// Start begins claiming and running items in goroutines that live until
// Stop; ctx only carries values. Starting a started runner does nothing.
func (r *Runner) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		return
	}
	r.cur = newRun(context.WithoutCancel(ctx), r.cfg)
}

// Stop stops claiming, lets running items end within Grace (or until ctx
// ends), then cancels the rest and hands their leases back, and returns
// once every goroutine of the runner has ended. Concurrent calls all wait
// for the one stop.
func (r *Runner) Stop(ctx context.Context) {
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

// Causes of an item's cancellation.
var (
	errStopping = errors.New("the runner is stopping")
	errLost     = errors.New("the item's lease was lost")
)

// run is one Start..Stop of a Runner.
type run struct {
	cfg        Config
	log        *slog.Logger
	work       context.Context // running items' parent; canceled at the end of the grace
	cancelWork context.CancelCauseFunc
	stopping   chan struct{} // closed: claim no more
	stopOnce   sync.Once
	slots      chan struct{} // one token per running item
	items      sync.WaitGroup
	loopDone   chan struct{}
	idle       chan struct{} // the loop and every item ended
	renewDone  chan struct{}
	done       chan struct{} // every goroutine ended

	mu   sync.Mutex
	held map[string]*held
}

// held is an item being run: its lease and how to stop it.
type held struct {
	lease    store.ItemLease
	cancel   context.CancelCauseFunc
	deadline time.Time // local clock: the lease is surely gone after it
	lost     bool
}

func newRun(ctx context.Context, cfg Config) *run {
	work, cancel := context.WithCancelCause(ctx)
	r := &run{
		cfg: cfg, log: cfg.Logger.With("owner", cfg.Owner),
		work: work, cancelWork: cancel,
		stopping: make(chan struct{}), slots: make(chan struct{}, cfg.Concurrency),
		loopDone: make(chan struct{}), idle: make(chan struct{}), renewDone: make(chan struct{}), done: make(chan struct{}),
		held: map[string]*held{},
	}
	go r.loop()
	go r.renew()
	go func() {
		<-r.loopDone
		r.items.Wait()
		close(r.idle)
		<-r.renewDone
		cancel(nil)
		close(r.done)
	}()
	return r
}

func (r *run) stop(ctx context.Context) {
	r.stopOnce.Do(func() { close(r.stopping) })
	grace := time.NewTimer(r.cfg.Grace)
	defer grace.Stop()
	select {
	case <-r.idle:
	case <-grace.C:
	case <-ctx.Done():
	}
	r.cancelWork(errStopping)
	<-r.done
}

// sleep waits d, or less when the run stops; it says whether to go on.
func (r *run) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stopping:
		return false
	}
}

// loop claims items while slots are free, and starts each.
func (r *run) loop() {
	defer close(r.loopDone)
	poll := r.cfg.PollMin
	for {
		select {
		case r.slots <- struct{}{}:
		case <-r.stopping:
			return
		}
		n := 1
	grab:
		for n < r.cfg.Concurrency {
			select {
			case r.slots <- struct{}{}:
				n++
			default:
				break grab
			}
		}
		items, err := r.cfg.Store.ClaimItems(r.work, store.ClaimParams{
			Owner: r.cfg.Owner, Limit: n, TTL: r.cfg.LeaseTTL, MaxAttempts: r.cfg.MaxAttempts,
		})
		if err != nil {
			items = nil
			if r.work.Err() == nil {
				r.log.Error("claim publication items", "err", err)
			}
		}
		for range n - len(items) {
			<-r.slots
		}
		if len(items) == 0 {
			if !r.sleep(jitter(poll)) {
				return
			}
			poll = min(2*poll, r.cfg.PollMax)
			continue
		}
		poll = r.cfg.PollMin
		claimedAt := time.Now()
		for _, it := range items {
			r.start(it, claimedAt)
		}
	}
}

func (r *run) start(it store.ClaimedItem, claimedAt time.Time) {
	ctx, cancel := context.WithCancelCause(r.work)
	h := &held{lease: it.ItemLease, cancel: cancel, deadline: claimedAt.Add(r.cfg.LeaseTTL)}
	r.mu.Lock()
	r.held[it.ItemID] = h
	r.mu.Unlock()
	r.items.Add(1)
	go func() {
		defer r.items.Done()
		defer func() { <-r.slots }()
		defer cancel(nil)
		r.runItem(ctx, h, it)
	}()
}

// runItem hands the item to its channel and records how it ended, with
// its fence.
func (r *run) runItem(ctx context.Context, h *held, it store.ClaimedItem) {
	log := r.log.With("item", it.ItemID, "publication", it.PublicationID, "channel", it.Channel, "attempt", it.Attempt)
	err := r.publish(ctx, it)
	r.mu.Lock()
	delete(r.held, it.ItemID)
	lost := h.lost
	r.mu.Unlock()
	// The store calls below must run even when the item was canceled.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.LeaseTTL)
	defer cancel()
	var outcome Outcome
	switch {
	case lost:
		outcome = OutcomeLost
	case err == nil:
		errs, cerr := r.cfg.Store.CompleteItems(sctx, []store.ItemLease{it.ItemLease})
		switch {
		case cerr != nil:
			log.Error("record a published item", "err", cerr)
			return
		case errs[0] != nil:
			outcome = OutcomeLost
		default:
			outcome = OutcomeSucceeded
			log.Debug("item published")
		}
	case errors.Is(context.Cause(ctx), errStopping):
		errs, rerr := r.cfg.Store.ReleaseItems(sctx, []store.ItemLease{it.ItemLease})
		switch {
		case rerr != nil:
			log.Error("hand back an item", "err", rerr)
			return
		case errs[0] != nil:
			outcome = OutcomeLost
		default:
			outcome = OutcomeReleased
		}
	default:
		backoff := worker.Backoff(r.cfg.RetryBase, r.cfg.RetryMax, it.Attempt, mrand.Float64())
		state, ferr := r.cfg.Store.FailItem(sctx, store.ItemFailure{ItemLease: it.ItemLease, Error: err.Error(),
			Permanent: IsPermanent(err), MaxAttempts: r.cfg.MaxAttempts, Backoff: backoff})
		switch {
		case errors.Is(ferr, store.ErrLeaseLost):
			outcome = OutcomeLost
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
	if r.cfg.Observe != nil {
		r.cfg.Observe(it.Channel, outcome)
	}
}

// publish runs the item's channel, turning a panic into an error.
func (r *run) publish(ctx context.Context, it store.ClaimedItem) (err error) {
	ch := r.cfg.Channels[it.Channel]
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

// renew extends the leases of running items every third of the TTL. A
// lease the store says is lost, or one not renewed before its deadline
// (the store did not answer), cancels its item.
func (r *run) renew() {
	defer close(r.renewDone)
	every := r.cfg.LeaseTTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.renewOnce()
		case <-r.idle:
			return
		}
	}
}

func (r *run) renewOnce() {
	r.mu.Lock()
	leases := make([]store.ItemLease, 0, len(r.held))
	for _, h := range r.held {
		leases = append(leases, h.lease)
	}
	r.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	asked := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.work), r.cfg.LeaseTTL/3)
	res, err := r.cfg.Store.RenewItemLeases(ctx, store.ItemRenewParams{Owner: r.cfg.Owner, Leases: leases, TTL: r.cfg.LeaseTTL})
	cancel()
	lost := map[string]bool{}
	for _, id := range res.Lost {
		lost[id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range leases {
		h := r.held[l.ItemID]
		if h == nil {
			continue // ended meanwhile
		}
		switch {
		case err == nil && !lost[l.ItemID]:
			h.deadline = asked.Add(r.cfg.LeaseTTL)
		case err == nil || time.Now().After(h.deadline):
			h.lost = true
			h.cancel(errLost)
		}
	}
	if err != nil {
		r.log.Error("renew item leases", "err", err)
	}
}

// jitter spreads a poll wait by up to a quarter, so idle runners do not
// claim in step.
func jitter(d time.Duration) time.Duration {
	return d - time.Duration(mrand.Float64()*float64(d/4))
}
