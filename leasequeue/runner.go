package leasequeue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	cur *run[T] // nil while stopped

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
			r.cur = newRun(context.WithoutCancel(ctx), r.cfg, r.h, &r.stats)
			r.cur.start()
			r.mu.Unlock()
			return nil
		}
		r.mu.Unlock()
		if !cur.s.Stopping() {
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

// Session is one Start..Stop of a Runner, as its handler sees it.
type Session struct {
	bg       context.Context // lives until every item has ended
	stopping atomic.Bool
	stopCh   chan struct{} // closed when Stop begins
	stopCtx  context.Context
	endStop  context.CancelFunc // ends stopCtx, with stopCh
	// avgRun is a moving average of how long items take to run (ns),
	// reported by the handler; it sizes how far ahead the runner claims.
	avgRun atomic.Int64
	// outage logs a database outage once when it begins, once when it
	// ends.
	outage *store.Outage
}

// Fault tells the session of a database fault a handler met (it is
// logged once per outage, not once per item), and says whether err is
// one. A handler hands such an item back rather than failing it: a fault
// of the database is not the item's.
func (s *Session) Fault(err error) bool {
	f := store.FaultOf(err)
	if f != nil && s != nil {
		s.outage.Fault(f)
	}
	return f != nil
}

// Background lives until every item of the session has ended: the context
// for writes that end an item after its own context ended.
func (s *Session) Background() context.Context { return s.bg }

// StopContext ends when Stop begins.
func (s *Session) StopContext() context.Context { return s.stopCtx }

// Stopping says whether Stop has begun.
func (s *Session) Stopping() bool { return s.stopping.Load() }

// Observe adds an item's run time to the moving average (weight 1/16) that
// sizes claims with Config.ClaimAhead.
func (s *Session) Observe(d time.Duration) {
	d = max(d, time.Microsecond)
	for {
		old := s.avgRun.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/16
		}
		if s.avgRun.CompareAndSwap(old, next) {
			return
		}
	}
}

// held is an item the runner holds a lease on.
type held[T any] struct {
	item   T
	ctx    context.Context
	cancel context.CancelCauseFunc
	// deadline is the local time (unix ns) after which the lease must be
	// taken as lost if no renewal confirmed it.
	deadline atomic.Int64
}

// run is one Start..Stop of a Runner.
type run[T any] struct {
	cfg Config
	h   Handler[T]
	s   *Session

	stopBg   context.CancelFunc
	work     context.Context // parent of every item's context
	abort    context.CancelCauseFunc
	stopOnce sync.Once
	done     chan struct{} // closed when Stop has ended

	mu   sync.Mutex
	held map[string]*held[T]
	wake chan struct{} // a held item ended

	stats *stats
	// sub hears Options.Wake; claimNow and renewNow are its pokes of the
	// fetch and renewal loops (capacity one: a poke waiting is enough).
	sub                *wake.Sub
	claimNow, renewNow chan struct{}

	itemsWG sync.WaitGroup
	fetchWG sync.WaitGroup
	bgWG    sync.WaitGroup
}

func newRun[T any](base context.Context, cfg Config, h Handler[T], st *stats) *run[T] {
	r := &run[T]{
		cfg:      cfg,
		h:        h,
		s:        &Session{stopCh: make(chan struct{}), outage: store.NewOutage(cfg.Logger, cfg.Owner)},
		done:     make(chan struct{}),
		held:     map[string]*held[T]{},
		wake:     make(chan struct{}, 1),
		stats:    st,
		claimNow: make(chan struct{}, 1),
		renewNow: make(chan struct{}, 1),
	}
	r.s.bg, r.stopBg = context.WithCancel(base)
	r.s.stopCtx, r.s.endStop = context.WithCancel(base)
	r.work, r.abort = context.WithCancelCause(base)
	return r
}

func (r *run[T]) start() {
	for _, loop := range r.cfg.Loops {
		r.bgWG.Add(1)
		go func() { defer r.bgWG.Done(); loop(r.s.bg) }()
	}
	r.bgWG.Add(1)
	go func() { defer r.bgWG.Done(); r.renewLoop() }()
	if r.cfg.Wake != nil {
		kinds := r.cfg.WakeOn
		if _, ok := r.h.(Parenter[T]); ok {
			kinds |= wake.Cancel
		}
		r.sub = r.cfg.Wake.Subscribe(kinds)
		r.bgWG.Add(1)
		go func() { defer r.bgWG.Done(); r.wakeLoop() }()
	}
	r.fetchWG.Add(1)
	go func() { defer r.fetchWG.Done(); r.fetchLoop() }()
	if r.cfg.OnStart != nil {
		r.cfg.OnStart()
	}
}

// stop: no more claims; running items end within the grace period, then
// the rest are cancelled; then the loops and the renewals stop.
func (r *run[T]) stop(ctx context.Context) {
	r.stopOnce.Do(func() {
		go func() {
			defer close(r.done)
			r.s.stopping.Store(true)
			close(r.s.stopCh)
			r.s.endStop()
			r.fetchWG.Wait()
			itemsDone := make(chan struct{})
			go func() { r.itemsWG.Wait(); close(itemsDone) }()
			grace := time.NewTimer(r.cfg.Grace)
			defer grace.Stop()
			select {
			case <-itemsDone:
			case <-grace.C:
				r.abort(ErrStopping)
			case <-ctx.Done():
				r.abort(ErrStopping)
			}
			<-itemsDone
			r.stopBg()
			r.bgWG.Wait()
			r.abort(ErrStopping)
			if r.cfg.OnStop != nil {
				r.cfg.OnStop()
			}
		}()
	})
	<-r.done
}

// sleep waits d, or until a wake-up says there is work, or until the
// runner stops; it answers false on stop.
func (r *run[T]) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.claimNow:
		return true
	case <-r.s.stopCh:
		return false
	}
}

// poke wakes a loop waiting on ch (claimNow, renewNow), now or at its
// next wait.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// wakeLoop turns the hub's events into pokes: work due now makes the
// fetch loop claim; work due later (a retry's backoff) makes it claim
// then; a cancel ends the items of the parents named, or renews every
// lease when it names none. It runs until every item has ended.
func (r *run[T]) wakeLoop() {
	defer r.sub.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var at time.Time // when the timer fires; zero when it is stopped
	for {
		select {
		case <-r.s.bg.Done():
			return
		case <-timer.C:
			at = time.Time{}
			poke(r.claimNow)
			continue
		case <-r.sub.C():
		}
		now := r.cfg.Now()
		p := r.sub.Take(now)
		if p.Due&r.cfg.WakeOn != 0 {
			poke(r.claimNow)
		}
		if !p.Next.IsZero() && (at.IsZero() || p.Next.Before(at)) {
			at = p.Next
			timer.Reset(at.Sub(now))
		}
		if p.Due&wake.Cancel != 0 {
			ids, all := p.IDs(wake.Cancel)
			if all {
				poke(r.renewNow)
			} else {
				r.cancelParents(ids)
			}
		}
	}
}

// cancelParents ends, with ErrCanceled, the items held whose parent is
// one of ids.
func (r *run[T]) cancelParents(ids []string) {
	p, ok := r.h.(Parenter[T])
	if !ok || len(ids) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.held {
		for _, id := range ids {
			if p.Parent(h.item) == id {
				h.cancel(ErrCanceled)
				break
			}
		}
	}
}

// Jitter spreads d over [d/2, d], so that idle runners do not poll in step.
func Jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Backoff is the wait before the next try after attempt (1-based) failed:
// base·2^(attempt-1), at most max, with equal jitter (half of it fixed,
// the other half scaled by r in [0, 1)).
func Backoff(base, max time.Duration, attempt int, r float64) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + time.Duration(r*float64(d-half))
}

// RetryWait is the wait before the next try after attempt (1-based)
// failed with err: Backoff, or longer when an error in err's chain asks
// for a wait of its own through a RetryWait method (a provider's or a
// receiver's 429 or 503 with Retry-After; the asker bounds what it asks).
// A permanent failure is not tried again, whatever this answers.
func RetryWait(base, max time.Duration, attempt int, r float64, err error) time.Duration {
	d := Backoff(base, max, attempt, r)
	var asker interface{ RetryWait() time.Duration }
	if errors.As(err, &asker) {
		if asked := asker.RetryWait(); asked > d {
			d = asked
		}
	}
	return d
}

// holdCap is how many leases the runner may hold now, and how many must be
// free before it claims again.
func (r *run[T]) holdCap() (hold, claimAt int) {
	c := r.cfg.Concurrency
	if !r.cfg.ClaimAhead {
		return c, 1
	}
	avg := time.Duration(r.s.avgRun.Load())
	ahead := c
	if avg > 0 {
		ahead = int(min(int64(MaxHeld), int64(c)*int64(LookAhead)/int64(avg)))
	}
	hold = min(MaxHeld, c+max(ahead, c))
	return hold, max(hold/2, 1)
}

// fetchLoop claims items while the runner has room (see holdCap).
func (r *run[T]) fetchLoop() {
	idle := r.cfg.PollMin
	for {
		room, ok := r.waitRoom()
		if !ok {
			return
		}
		t0 := r.cfg.Now()
		// A poke from before this claim is answered by it; one that comes
		// while it runs stays, for work it may not have seen.
		select {
		case <-r.claimNow:
		default:
		}
		items, err := r.h.Claim(r.s.bg, r.cfg.Owner, room, r.cfg.LeaseTTL)
		r.stats.claims.Add(1)
		if err == nil && len(items) == 0 {
			r.stats.empty.Add(1)
		}
		switch {
		case err == nil:
			r.s.outage.OK()
		case r.s.Fault(err):
			// Logged once per outage; the wait below grows to PollMax.
		case r.s.bg.Err() == nil:
			r.cfg.Logger.Warn("claim failed", "err", err)
		}
		if len(items) == 0 {
			if !r.sleep(Jitter(idle)) {
				return
			}
			idle = min(2*idle, r.cfg.PollMax)
			continue
		}
		idle = r.cfg.PollMin
		for _, it := range items {
			r.launch(it, t0)
		}
	}
}

// waitRoom waits until enough of the runner's leases are free, and answers
// how many more it may take; false when the runner stops.
func (r *run[T]) waitRoom() (int, bool) {
	for {
		select {
		case <-r.s.stopCh:
			return 0, false
		default:
		}
		hold, claimAt := r.holdCap()
		r.mu.Lock()
		room := hold - len(r.held)
		r.mu.Unlock()
		if room >= claimAt {
			return room, true
		}
		select {
		case <-r.wake:
		case <-r.s.stopCh:
			return 0, false
		}
	}
}

// launch starts a claimed item's goroutine.
func (r *run[T]) launch(it T, t0 time.Time) {
	ctx, cancel := context.WithCancelCause(r.work)
	h := &held[T]{item: it, ctx: ctx, cancel: cancel}
	h.deadline.Store(t0.Add(r.cfg.LeaseTTL).UnixNano())
	key := r.h.Lease(it).ID
	r.mu.Lock()
	r.held[key] = h
	r.mu.Unlock()
	r.itemsWG.Add(1)
	go func() {
		defer r.itemsWG.Done()
		defer r.forget(key, h)
		r.h.Run(ctx, r.s, it)
	}()
}

// forget drops an ended item and wakes the fetch loop.
func (r *run[T]) forget(key string, h *held[T]) {
	h.cancel(nil)
	r.mu.Lock()
	if r.held[key] == h {
		delete(r.held, key)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// renewLoop renews every lease the runner holds, every ttl/3, one renewal
// at a time.
func (r *run[T]) renewLoop() {
	t := time.NewTicker(r.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-r.s.bg.Done():
			return
		case <-t.C:
		case <-r.renewNow:
		}
		r.renewOnce()
	}
}

func (r *run[T]) renewOnce() {
	r.mu.Lock()
	live := make([]*held[T], 0, len(r.held))
	for _, h := range r.held {
		if h.ctx.Err() == nil {
			live = append(live, h)
		}
	}
	r.mu.Unlock()
	if len(live) > 0 {
		leases := make([]store.Lease, len(live))
		for i, h := range live {
			leases[i] = r.h.Lease(h.item)
		}
		t0 := r.cfg.Now()
		// Past the last of these leases' deadlines a renewal serves none
		// of them: a call that hangs (a stuck connection) ends then, and
		// the check below ends the items it could not confirm.
		var last int64
		for _, h := range live {
			last = max(last, h.deadline.Load())
		}
		rctx, cancel := context.WithTimeout(r.s.bg, time.Duration(last-t0.UnixNano()))
		res, err := r.cfg.Leases.RenewLeases(rctx, store.RenewParams{Owner: r.cfg.Owner, Leases: leases, TTL: r.cfg.LeaseTTL})
		cancel()
		if err != nil {
			if r.s.bg.Err() == nil && !r.s.Fault(err) {
				r.cfg.Logger.Warn("lease renewal failed", "leases", len(leases), "err", err)
			}
		} else {
			isLost := make(map[string]bool, len(res.Lost))
			for _, k := range res.Lost {
				isLost[k] = true
			}
			isCanceled := make(map[string]bool, len(res.Canceled))
			for _, k := range res.Canceled {
				isCanceled[k] = true
			}
			if len(res.Lost) > 0 {
				poke(r.claimNow) // an expired lease is claimable again
			}
			for i, h := range live {
				key := leases[i].ID
				switch {
				case isLost[key]:
					h.cancel(store.ErrLeaseLost)
				case isCanceled[key]:
					h.deadline.Store(t0.Add(r.cfg.LeaseTTL).UnixNano())
					h.cancel(ErrCanceled)
				default:
					h.deadline.Store(t0.Add(r.cfg.LeaseTTL).UnixNano())
				}
			}
		}
	}
	// Leases this renewal did not confirm in time are lost, whatever the
	// reason (a slow database, a process that was stopped). An item claimed
	// after the renewal began waits for the next one: its lease is not
	// given up before a renewal was tried.
	now := r.cfg.Now().UnixNano()
	for _, h := range live {
		if now >= h.deadline.Load() {
			h.cancel(store.ErrLeaseLost)
			poke(r.claimNow)
		}
	}
}
