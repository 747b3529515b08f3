package leasequeue

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"studio/store"
	"studio/wake"
)

// Session is one Start..Stop of a Runner, as its handler sees it (the
// runner's own part of it is a session).
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

// session is one Start..Stop of a Runner: its loops (fetch, renewal,
// wake-ups, Config.Loops) and the items it holds. The Session it embeds
// is the part its handler sees.
type session[T any] struct {
	*Session
	cfg Config
	h   Handler[T]

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

func newSession[T any](base context.Context, cfg Config, h Handler[T], st *stats) *session[T] {
	s := &session[T]{
		Session:  &Session{stopCh: make(chan struct{}), outage: store.NewOutage(cfg.Logger, cfg.Owner)},
		cfg:      cfg,
		h:        h,
		done:     make(chan struct{}),
		held:     map[string]*held[T]{},
		wake:     make(chan struct{}, 1),
		stats:    st,
		claimNow: make(chan struct{}, 1),
		renewNow: make(chan struct{}, 1),
	}
	s.bg, s.stopBg = context.WithCancel(base)
	s.stopCtx, s.endStop = context.WithCancel(base)
	s.work, s.abort = context.WithCancelCause(base)
	return s
}

func (s *session[T]) start() {
	for _, loop := range s.cfg.Loops {
		s.bgWG.Add(1)
		go func() { defer s.bgWG.Done(); loop(s.bg) }()
	}
	s.bgWG.Add(1)
	go func() { defer s.bgWG.Done(); s.renewLoop() }()
	if s.cfg.Wake != nil {
		kinds := s.cfg.WakeOn
		if _, ok := s.h.(Parenter[T]); ok {
			kinds |= wake.Cancel
		}
		s.sub = s.cfg.Wake.Subscribe(kinds)
		s.bgWG.Add(1)
		go func() { defer s.bgWG.Done(); s.wakeLoop() }()
	}
	s.fetchWG.Add(1)
	go func() { defer s.fetchWG.Done(); s.fetchLoop() }()
	if s.cfg.OnStart != nil {
		s.cfg.OnStart()
	}
}

// stop: no more claims; running items end within the grace period, then
// the rest are cancelled; then the loops and the renewals stop.
func (s *session[T]) stop(ctx context.Context) {
	s.stopOnce.Do(func() {
		go func() {
			defer close(s.done)
			s.stopping.Store(true)
			close(s.stopCh)
			s.endStop()
			s.fetchWG.Wait()
			itemsDone := make(chan struct{})
			go func() { s.itemsWG.Wait(); close(itemsDone) }()
			grace := time.NewTimer(s.cfg.Grace)
			defer grace.Stop()
			select {
			case <-itemsDone:
			case <-grace.C:
				s.abort(ErrStopping)
			case <-ctx.Done():
				s.abort(ErrStopping)
			}
			<-itemsDone
			s.stopBg()
			s.bgWG.Wait()
			s.abort(ErrStopping)
			if s.cfg.OnStop != nil {
				s.cfg.OnStop()
			}
		}()
	})
	<-s.done
}

// sleep waits d, or until a wake-up says there is work, or until the
// runner stops; it answers false on stop.
func (s *session[T]) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.claimNow:
		return true
	case <-s.stopCh:
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
func (s *session[T]) wakeLoop() {
	defer s.sub.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var at time.Time // when the timer fires; zero when it is stopped
	for {
		select {
		case <-s.bg.Done():
			return
		case <-timer.C:
			at = time.Time{}
			poke(s.claimNow)
			continue
		case <-s.sub.C():
		}
		now := s.cfg.Now()
		p := s.sub.Take(now)
		if p.Due&s.cfg.WakeOn != 0 {
			poke(s.claimNow)
		}
		if !p.Next.IsZero() && (at.IsZero() || p.Next.Before(at)) {
			at = p.Next
			timer.Reset(at.Sub(now))
		}
		if p.Due&wake.Cancel != 0 {
			ids, all := p.IDs(wake.Cancel)
			if all {
				poke(s.renewNow)
			} else {
				s.cancelParents(ids)
			}
		}
	}
}

// cancelParents ends, with ErrCanceled, the items held whose parent is
// one of ids.
func (s *session[T]) cancelParents(ids []string) {
	p, ok := s.h.(Parenter[T])
	if !ok || len(ids) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		for _, id := range ids {
			if p.Parent(h.item) == id {
				h.cancel(ErrCanceled)
				break
			}
		}
	}
}

// holdCap is how many leases the runner may hold now, and how many must be
// free before it claims again.
func (s *session[T]) holdCap() (hold, claimAt int) {
	c := s.cfg.Concurrency
	if !s.cfg.ClaimAhead {
		return c, 1
	}
	avg := time.Duration(s.avgRun.Load())
	ahead := c
	if avg > 0 {
		ahead = int(min(int64(MaxHeld), int64(c)*int64(LookAhead)/int64(avg)))
	}
	hold = min(MaxHeld, c+max(ahead, c))
	return hold, max(hold/2, 1)
}

// fetchLoop claims items while the runner has room (see holdCap).
func (s *session[T]) fetchLoop() {
	idle := s.cfg.PollMin
	for {
		room, ok := s.waitRoom()
		if !ok {
			return
		}
		t0 := s.cfg.Now()
		// A poke from before this claim is answered by it; one that comes
		// while it runs stays, for work it may not have seen.
		select {
		case <-s.claimNow:
		default:
		}
		items, err := s.h.Claim(s.bg, s.cfg.Owner, room, s.cfg.LeaseTTL)
		s.stats.claims.Add(1)
		if err == nil && len(items) == 0 {
			s.stats.empty.Add(1)
		}
		switch {
		case err == nil && len(items) > 0:
			s.outage.OK()
		case err == nil:
			// A claim that took nothing may have only read, which SQLite
			// allows while another connection holds its write lock.
			s.outage.ReadOK()
		case s.Fault(err):
			// Logged once per outage; the wait below grows to PollMax.
		case s.bg.Err() == nil:
			s.cfg.Logger.Warn("claim failed", "err", err)
		}
		if len(items) == 0 {
			if !s.sleep(Jitter(idle)) {
				return
			}
			idle = min(2*idle, s.cfg.PollMax)
			continue
		}
		idle = s.cfg.PollMin
		for _, it := range items {
			s.launch(it, t0)
		}
	}
}

// waitRoom waits until enough of the runner's leases are free, and answers
// how many more it may take; false when the runner stops.
func (s *session[T]) waitRoom() (int, bool) {
	for {
		select {
		case <-s.stopCh:
			return 0, false
		default:
		}
		hold, claimAt := s.holdCap()
		s.mu.Lock()
		room := hold - len(s.held)
		s.mu.Unlock()
		if room >= claimAt {
			return room, true
		}
		select {
		case <-s.wake:
		case <-s.stopCh:
			return 0, false
		}
	}
}

// launch starts a claimed item's goroutine.
func (s *session[T]) launch(it T, t0 time.Time) {
	ctx, cancel := context.WithCancelCause(s.work)
	h := &held[T]{item: it, ctx: ctx, cancel: cancel}
	h.deadline.Store(t0.Add(s.cfg.LeaseTTL).UnixNano())
	key := s.h.Lease(it).ID
	s.mu.Lock()
	s.held[key] = h
	s.mu.Unlock()
	s.itemsWG.Add(1)
	go func() {
		defer s.itemsWG.Done()
		defer s.forget(key, h)
		s.h.Run(ctx, s.Session, it)
	}()
}

// forget drops an ended item and wakes the fetch loop.
func (s *session[T]) forget(key string, h *held[T]) {
	h.cancel(nil)
	s.mu.Lock()
	if s.held[key] == h {
		delete(s.held, key)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// renewLoop renews every lease the runner holds, every ttl/3, one renewal
// at a time.
func (s *session[T]) renewLoop() {
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.bg.Done():
			return
		case <-t.C:
		case <-s.renewNow:
		}
		s.renewOnce()
	}
}

func (s *session[T]) renewOnce() {
	s.mu.Lock()
	live := make([]*held[T], 0, len(s.held))
	for _, h := range s.held {
		if h.ctx.Err() == nil {
			live = append(live, h)
		}
	}
	s.mu.Unlock()
	if len(live) > 0 {
		leases := make([]store.Lease, len(live))
		for i, h := range live {
			leases[i] = s.h.Lease(h.item)
		}
		t0 := s.cfg.Now()
		// Past the last of these leases' deadlines a renewal serves none
		// of them: a call that hangs (a stuck connection) ends then, and
		// the check below ends the items it could not confirm.
		var last int64
		for _, h := range live {
			last = max(last, h.deadline.Load())
		}
		rctx, cancel := context.WithTimeout(s.bg, time.Duration(last-t0.UnixNano()))
		res, err := s.cfg.Leases.RenewLeases(rctx, store.RenewParams{Owner: s.cfg.Owner, Leases: leases, TTL: s.cfg.LeaseTTL})
		cancel()
		if err != nil {
			if s.bg.Err() == nil && !s.Fault(err) {
				s.cfg.Logger.Warn("lease renewal failed", "leases", len(leases), "err", err)
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
				poke(s.claimNow) // an expired lease is claimable again
			}
			for i, h := range live {
				key := leases[i].ID
				switch {
				case isLost[key]:
					h.cancel(store.ErrLeaseLost)
				case isCanceled[key]:
					h.deadline.Store(t0.Add(s.cfg.LeaseTTL).UnixNano())
					h.cancel(ErrCanceled)
				default:
					h.deadline.Store(t0.Add(s.cfg.LeaseTTL).UnixNano())
				}
			}
		}
	}
	// Leases this renewal did not confirm in time are lost, whatever the
	// reason (a slow database, a process that was stopped). An item claimed
	// after the renewal began waits for the next one: its lease is not
	// given up before a renewal was tried.
	now := s.cfg.Now().UnixNano()
	for _, h := range live {
		if now >= h.deadline.Load() {
			h.cancel(store.ErrLeaseLost)
			poke(s.claimNow)
		}
	}
}
