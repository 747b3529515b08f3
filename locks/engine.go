package locks

import (
	"container/list"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// cleanupTimeout bounds the release that follows an acquisition whose
// outcome is unknown.
const cleanupTimeout = 30 * time.Second

// CloseGrace is how long Close lets store calls that give keys back (the
// releases of holds that end because of Close) run before it cancels them;
// acquisitions and renewals in flight are canceled at once.
const CloseGrace = time.Second

// errReleased is the cause of fn's context once fn has returned and the
// lease is being released, for goroutines fn left behind.
var errReleased = errors.New("locks: lease released")

// Engine grants leases on keys of one Store: Hold and TryHold for locks (one
// holder per key), Semaphore for up to N holders. Waiters of this engine on
// one key are served first come, first served; waiters in other engines or
// processes compete through the store. An Engine is safe for concurrent use.
//
// Lock ownership: e.mu guards the queues, the list of leases, the renewal
// heap, the owner counter and closed. Each helper below takes and releases
// e.mu itself and never calls the store while holding it; the few that
// expect it held say so and end in Locked. No function unlocks a mutex its caller locked.
type Engine struct {
	store    Store
	defaults settings
	prefix   string // 128 random bits in hex: every owner starts with them

	mu          sync.Mutex
	queues      [2]map[string]*queue // by key: [0] locks, [1] semaphores
	swept       int                  // len of both after the last sweep of idle queues
	active      *Lease               // leases from enter to release, linked through prev and next
	closed      bool
	grace       *time.Timer // ends the active leases' store calls, once Close has waited CloseGrace
	holds       sync.WaitGroup
	unsubscribe func() // from a Notifier store
	owners      uint64 // the counter after the prefix

	renewals   renewHeap   // running leases by next renewal
	renewTimer *time.Timer // fires at armedAt, if armed
	armedAt    time.Time
	armed      bool
}

// New returns an engine over store. The options become the defaults of
// every hold; an invalid one makes every hold fail with ErrInvalid. If the
// store is a Notifier, a release in another process wakes this engine's
// first waiter of the key at once; polling stays the fallback.
func New(store Store, opts ...Option) *Engine {
	e := &Engine{
		store:    store,
		defaults: defaultSettings().with(opts),
		queues:   [2]map[string]*queue{make(map[string]*queue), make(map[string]*queue)},
	}
	var seed [16]byte
	binary.LittleEndian.PutUint64(seed[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(seed[8:], rand.Uint64())
	e.prefix = hex.EncodeToString(seed[:])
	if n, ok := store.(Notifier); ok {
		e.unsubscribe = n.Subscribe(e.released)
	}
	return e
}

// released wakes the first waiter of a key that another process released.
func (e *Engine) released(slot bool, key string) {
	e.mu.Lock()
	if q := e.queues[space(slot)][key]; q != nil {
		if q.asking {
			q.missed = true
		}
		q.wakeFront()
	}
	e.mu.Unlock()
}

// lookAgainLocked wakes w, now first in line after an ask found the key
// held, if a release was announced during the ask. e.mu is held.
func (q *queue) lookAgainLocked(w *waiter) {
	if q.missed {
		q.missed = false
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Hold waits until key is free (or ctx ends, or the Wait option runs out),
// runs fn holding the lease, and releases it when fn returns or panics.
//
// fn's context ends when ctx ends, when the lease is lost (cause: a
// *LeaseLostError), when the engine closes (cause: ErrClosed) or after
// MaxHold (cause: ErrMaxHold); context.Cause tells which. Hold returns fn's
// error, except that a lost lease is always reported (a *LeaseLostError,
// joined with fn's own error if fn returned one that is not just its
// context's end), and a release failure is joined as an error wrapping
// ErrRelease. A panic in fn releases the key and goes on up. Waiting ends
// with a *TimeoutError (Wait option), ErrClosed, or ctx's cause.
func (e *Engine) Hold(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	_, err := e.hold(ctx, target{}, key, fn, e.defaults, opts, false)
	return err
}

// TryHold runs fn holding key only if key is free now: not held, and no
// waiter of this engine queued for it; Hold with Wait(0) runs fn in
// exactly the same cases, and fails with a *TimeoutError where TryHold
// answers false. It reports whether fn ran; err is as Hold's when it ran,
// or the store's error when asking failed.
func (e *Engine) TryHold(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...Option) (ran bool, err error) {
	return e.hold(ctx, target{}, key, fn, e.defaults, opts, true)
}

// Close ends the engine: every waiter returns ErrClosed, every running fn's
// context ends with cause ErrClosed, store calls in flight that acquire or
// renew are canceled, and Close returns once every Hold has returned. The
// releases of those holds get CloseGrace to reach the store, then they are
// canceled too (the key then stays taken until its TTL runs out). Later
// holds fail with ErrClosed. Close may be called more than once; it must
// not be called from inside fn.
func (e *Engine) Close() error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		for l := e.active; l != nil; l = l.next {
			l.cancel(ErrClosed)
		}
		e.grace = time.AfterFunc(CloseGrace, e.endCalls)
	}
	e.mu.Unlock()
	e.holds.Wait()
	e.mu.Lock()
	e.grace.Stop()
	if e.renewTimer != nil {
		e.renewTimer.Stop()
	}
	unsubscribe := e.unsubscribe
	e.unsubscribe = nil
	e.mu.Unlock()
	if unsubscribe != nil {
		unsubscribe()
	}
	return nil
}

// endCalls cancels the store calls of every lease still active: the
// releases that Close let run for CloseGrace, and the renewals of fns that
// ignored their context's end.
func (e *Engine) endCalls() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for l := e.active; l != nil; l = l.next {
		l.endCalls(ErrClosed)
	}
}

// target is what a hold takes: a lock (limit 0) or a slot of a semaphore.
type target struct{ limit int }

func (t target) capacity() int {
	if t.limit == 0 {
		return 1
	}
	return t.limit
}

func (t target) acquire(ctx context.Context, s Store, key, owner string, ttl time.Duration) (int64, bool, error) {
	if t.limit == 0 {
		return s.Acquire(ctx, key, owner, ttl)
	}
	return s.AcquireSlot(ctx, key, owner, t.limit, ttl)
}

func (t target) renew(ctx context.Context, s Store, key, owner string, ttl time.Duration) (bool, error) {
	if t.limit == 0 {
		return s.Renew(ctx, key, owner, ttl)
	}
	return s.RenewSlot(ctx, key, owner, ttl)
}

func (t target) release(ctx context.Context, s Store, key, owner string) (bool, error) {
	if t.limit == 0 {
		return s.Release(ctx, key, owner)
	}
	return s.ReleaseSlot(ctx, key, owner)
}

// space is the index in Engine.queues of the locks (slot false) or the
// semaphores: separate key spaces, as in the store. Apart, each map is
// keyed by a plain string, which hashes faster than a struct.
func space(slot bool) int {
	if slot {
		return 1
	}
	return 0
}

// queue is this engine's state for one key: its waiters in arrival order
// and how many of its leases this engine holds. Only one caller at a time
// asks the store (asking), the front waiter or a caller that found the
// line empty, and only while held is below the capacity; so this engine
// never races itself for a key, and a release here wakes exactly the next
// waiter in line. An idle queue (no waiter, no holder, nobody asking) stays
// in the map for the key's next caller until a sweep drops it.
type queue struct {
	waiters list.List // of *waiter
	held    int
	asking  bool
	// missed: another process announced a release of the key while this
	// engine was asking the store for it. The ask may have been answered
	// before the release, and its asker was in no line to wake: once it
	// waits, it looks again at once instead of at its next poll.
	missed bool
}

func (q *queue) idle() bool { return q.held == 0 && q.waiters.Len() == 0 && !q.asking }

type waiter struct {
	wake chan struct{} // capacity 1: "look again"
	elem *list.Element
}

// wakeFront tells the front waiter to look again. e.mu is held.
func (q *queue) wakeFront() {
	if f := q.waiters.Front(); f != nil {
		select {
		case f.Value.(*waiter).wake <- struct{}{}:
		default:
		}
	}
}

func (e *Engine) hold(ctx context.Context, t target, key string, fn func(context.Context, *Lease) error, base settings, opts []Option, try bool) (bool, error) {
	s := base.with(opts)
	if s.err != nil {
		return false, fmt.Errorf("locks: hold: %w", s.err)
	}
	if err := CheckKey(key); err != nil {
		return false, fmt.Errorf("locks: hold: %w", err)
	}
	if fn == nil {
		return false, fmt.Errorf("locks: hold: %w: nil fn", ErrInvalid)
	}
	if try {
		s.wait = 0
	}
	if ctx.Err() != nil {
		return false, fmt.Errorf("locks: hold %q: %w", key, context.Cause(ctx))
	}
	l := e.newLease(ctx, t, key, s.ttl)
	w, err := e.enter(l)
	if err != nil {
		l.cancel(err)
		l.endCalls(err)
		return false, fmt.Errorf("locks: hold %q: %w", key, err)
	}
	defer e.holds.Done()
	if err := e.acquire(l, w, s); err != nil {
		e.abandon(l)
		if try && errors.Is(err, ErrTimeout) {
			return false, nil
		}
		return false, err
	}
	return true, e.run(l, fn, s)
}

// newLease makes the lease a hold will try to get, with its two contexts:
// fn's, which also carries the store calls that acquire the lease (so
// that the caller giving up or Close cancels them), and the one of the
// store calls that must outlive fn's (renewals and releases): the
// caller's values without its cancel, ended only by Close (after
// CloseGrace, see endCalls). Its first owner comes in enter.
func (e *Engine) newLease(ctx context.Context, t target, key string, ttl time.Duration) *Lease {
	l := &Lease{key: key, t: t, ttl: ttl, idx: -1, e: e}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	l.calls, l.endCalls = context.WithCancelCause(context.WithoutCancel(ctx))
	return l
}

// newOwnerLocked draws an owner no other acquisition uses: the engine's
// random prefix and the next count, in hex. e.mu is held.
func (e *Engine) newOwnerLocked() string {
	e.owners++
	var b [32 + 16]byte // the prefix and a 64-bit counter in hex: one allocation, the string
	return string(strconv.AppendUint(append(b[:0], e.prefix...), e.owners, 16))
}

// enter counts a hold in and links its lease (so that Close cancels it),
// unless the engine is closed. It answers nil if the caller may ask the
// store at once (the key's line is empty and this engine has room: the
// uncontended path, with nothing to allocate for waiting), or the
// caller's place at the back of the line.
func (e *Engine) enter(l *Lease) (*waiter, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	e.holds.Add(1)
	l.owner = e.newOwnerLocked()
	l.next = e.active
	if e.active != nil {
		e.active.prev = l
	}
	e.active = l
	l.linked = true
	queues := e.queues[space(l.t.limit > 0)]
	q := queues[l.key]
	if q == nil {
		e.sweepQueuesLocked()
		q = &queue{}
		queues[l.key] = q
	}
	l.q = q
	if q.waiters.Len() == 0 && !q.asking && q.held < l.t.capacity() {
		q.asking, q.missed = true, false
		return nil, nil
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	w.elem = q.waiters.PushBack(w)
	return w, nil
}

// sweepQueuesLocked drops idle queues once the map has doubled since the
// last sweep: amortized O(1) per new key. e.mu is held.
func (e *Engine) sweepQueuesLocked() {
	if len(e.queues[0])+len(e.queues[1]) <= 2*e.swept+64 {
		return
	}
	for _, queues := range e.queues {
		for k, q := range queues {
			if q.idle() {
				delete(queues, k)
			}
		}
	}
	e.swept = len(e.queues[0]) + len(e.queues[1])
}

// abandon unlinks a lease that was never granted (or was given back) and
// ends its context.
func (e *Engine) abandon(l *Lease) {
	e.mu.Lock()
	e.unlinkLocked(l)
	e.mu.Unlock()
	l.cancel(errReleased)
	l.endCalls(errReleased)
}

// unlinkLocked takes l off the list of leases. e.mu is held.
func (e *Engine) unlinkLocked(l *Lease) {
	if !l.linked {
		return
	}
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		e.active = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	}
	l.prev, l.next, l.linked = nil, nil, false
}

// acquire gets l its lease. A caller whose turn came at once (w nil) asks
// the store; if another process holds the key it waits at the front of
// the line, where it came. Everyone else waits in line.
func (e *Engine) acquire(l *Lease, w *waiter, s settings) error {
	if w != nil {
		return e.wait(l, w, s, true)
	}
	ok, err := e.ask(l)
	if ok || err != nil || s.wait == 0 {
		return e.settle(l, nil, ok, err)
	}
	return e.wait(l, e.waitAtFront(l.q), s, false)
}

// wait waits in l's line until its turn, then asks the store; while the
// store refuses (another process holds the key) it polls with backoff,
// woken early by a release in this engine or a Notifier. askNow: look at
// the line before the first wait.
func (e *Engine) wait(l *Lease, w *waiter, s settings, askNow bool) error {
	var deadline <-chan time.Time
	if s.wait > 0 {
		timer := time.NewTimer(s.wait)
		defer timer.Stop()
		deadline = timer.C
	}
	p := poller{min: s.pollMin, max: s.pollMax, backoff: s.pollMin}
	defer p.stop()
	if !askNow {
		p.later()
	}
	for {
		if askNow {
			if e.takeTurn(l, w) {
				ok, err := e.ask(l)
				if ok || err != nil || s.wait == 0 {
					return e.settle(l, w, ok, err)
				}
				e.endTurn(l.q, w)
				// Held elsewhere: nothing here will say when it is free.
				p.later()
			} else if s.wait == 0 {
				e.leave(l.q, w)
				return &TimeoutError{Key: l.key, Wait: 0}
			}
			// Not our turn: a release or a departure here wakes us.
		}
		select {
		case <-w.wake:
			p.reset()
			askNow = true
		case <-p.c:
			p.c = nil
			askNow = true
		case <-deadline:
			e.leave(l.q, w)
			return &TimeoutError{Key: l.key, Wait: s.wait}
		case <-l.ctx.Done(): // the caller's context or Close
			e.leave(l.q, w)
			return fmt.Errorf("locks: hold %q: %w", l.key, context.Cause(l.ctx))
		}
	}
}

// poller is a waiter's backoff against other processes: a timer after
// min, doubling up to max, each with jitter.
type poller struct {
	min, max, backoff time.Duration
	t                 *time.Timer
	c                 <-chan time.Time // nil while no poll is due
}

func (p *poller) later() {
	d := jitter(p.backoff)
	p.backoff = min(2*p.backoff, p.max)
	if p.t == nil {
		p.t = time.NewTimer(d)
	} else {
		p.t.Reset(d)
	}
	p.c = p.t.C
}

func (p *poller) reset() {
	p.backoff = p.min
	if p.t != nil {
		p.t.Stop()
	}
	p.c = nil
}

func (p *poller) stop() {
	if p.t != nil {
		p.t.Stop()
	}
}

// waitAtFront ends a turn that found the key held elsewhere and puts the
// caller at the front of the line, where it came.
func (e *Engine) waitAtFront(q *queue) *waiter {
	e.mu.Lock()
	defer e.mu.Unlock()
	q.asking = false
	w := &waiter{wake: make(chan struct{}, 1)}
	w.elem = q.waiters.PushFront(w)
	q.lookAgainLocked(w)
	return w
}

// takeTurn reports whether w may ask the store now (first in line, nobody
// asking, room in this engine) and if so marks it asking.
func (e *Engine) takeTurn(l *Lease, w *waiter) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := l.q
	if q.waiters.Front() != w.elem || q.asking || q.held >= l.t.capacity() {
		return false
	}
	q.asking, q.missed = true, false
	return true
}

// endTurn ends w's turn that found the key held elsewhere; w stays first
// in line.
func (e *Engine) endTurn(q *queue, w *waiter) {
	e.mu.Lock()
	q.asking = false
	q.lookAgainLocked(w)
	e.mu.Unlock()
}

// leave takes a waiter out of its line, passing the turn on if it had it.
func (e *Engine) leave(q *queue, w *waiter) {
	e.mu.Lock()
	defer e.mu.Unlock()
	front := q.waiters.Front() == w.elem
	q.waiters.Remove(w.elem)
	if front {
		q.wakeFront()
	}
}

// ask asks the store once for l's key under l's owner; false: held
// elsewhere. The call carries l's context, so the caller giving up or
// Close cancels it. If it fails the outcome is unknown: ask gives back
// whatever may have been taken (a release by an owner that holds nothing
// changes nothing) and draws a new owner for any later ask.
func (e *Engine) ask(l *Lease) (bool, error) {
	sent := time.Now()
	fence, ok, err := l.t.acquire(l.ctx, e.store, l.key, l.owner, l.ttl)
	if err != nil {
		rctx, cancel := context.WithTimeout(l.calls, cleanupTimeout)
		_, _ = l.t.release(rctx, e.store, l.key, l.owner)
		cancel()
		e.mu.Lock()
		l.owner = e.newOwnerLocked()
		e.mu.Unlock()
		if l.ctx.Err() != nil {
			return false, fmt.Errorf("locks: hold %q: %w", l.key, context.Cause(l.ctx))
		}
		return false, fmt.Errorf("locks: acquire %q: %w", l.key, err)
	}
	if ok {
		l.fence, l.expires = fence, sent.Add(l.ttl)
	}
	return ok, nil
}

// settle ends the turn of a caller whose wait is over: the store granted
// the key (ok), failed (err), or refused under Wait(0). The caller leaves
// the line; a granted lease is counted among the key's holders and its
// renewal scheduled, unless the caller or the engine went away meanwhile:
// then the lease is given back and the caller gets why.
func (e *Engine) settle(l *Lease, w *waiter, ok bool, err error) error {
	var gone error
	e.mu.Lock()
	q := l.q
	q.asking, q.missed = false, false
	if w != nil {
		q.waiters.Remove(w.elem)
	}
	if ok {
		q.held++
		if l.ctx.Err() != nil {
			gone = context.Cause(l.ctx)
		} else {
			e.schedule(l, l.expires.Add(l.ttl/3-l.ttl)) // sent + ttl/3
		}
	}
	if !ok || q.held < l.t.capacity() {
		q.wakeFront() // the next waiter may ask, or take another slot
	}
	e.mu.Unlock()
	switch {
	case err != nil:
		return err
	case gone != nil:
		err := fmt.Errorf("locks: hold %q: %w", l.key, gone)
		if rerr := e.release(l); rerr != nil {
			err = errors.Join(err, fmt.Errorf("%w %q: %w", ErrRelease, l.key, rerr))
		}
		return err
	case !ok:
		return &TimeoutError{Key: l.key, Wait: 0}
	}
	return nil
}

// release gives the lease back to the store and the turn to the next
// waiter. A lease the store no longer has (it expired) is not an error.
//
// The call carries the hold's values without its cancel (the caller may
// have gone: the key must still be given back), no deadline of its own (a
// store bounds its calls itself: SQLite's busy_timeout), and ends
// CloseGrace after Close.
func (e *Engine) release(l *Lease) error {
	_, err := l.t.release(l.calls, e.store, l.key, l.owner)
	e.mu.Lock()
	e.unlinkLocked(l)
	l.q.held--
	l.q.wakeFront()
	e.mu.Unlock()
	l.endCalls(errReleased)
	return err
}

// run calls fn with the lease, renewed meanwhile, and releases it.
func (e *Engine) run(l *Lease, fn func(context.Context, *Lease) error, s settings) (err error) {
	fctx := l.ctx
	if s.maxHold > 0 {
		var cancelMax context.CancelFunc
		fctx, cancelMax = context.WithTimeoutCause(l.ctx, s.maxHold, ErrMaxHold)
		defer cancelMax()
	}
	returned := false
	defer func() {
		// Runs on return, panic or Goexit alike. fn's context ends before
		// the key is free, so whatever fn left running sees it first.
		var cause error
		if fctx.Err() != nil {
			cause = context.Cause(fctx)
		}
		lost := e.stopRenewal(l)
		l.cancel(errReleased)
		rerr := e.release(l)
		if !returned {
			return // the panic goes on; nobody reads err
		}
		err = result(l.key, err, cause, lost)
		if rerr != nil {
			err = errors.Join(err, fmt.Errorf("%w %q: %w", ErrRelease, l.key, rerr))
		}
	}()
	err = fn(fctx, l)
	returned = true
	return err
}

// result decides what Hold returns from fn's error, the cause that ended
// fn's context (if any) and a lost lease (if any).
func result(key string, fnErr, cause error, lost *LeaseLostError) error {
	echo := func(c error) bool {
		// fn's error only says its context ended.
		return errors.Is(fnErr, c) || errors.Is(fnErr, context.Canceled) || errors.Is(fnErr, context.DeadlineExceeded)
	}
	if lost != nil {
		if fnErr == nil || echo(lost) {
			return lost
		}
		return errors.Join(fnErr, lost)
	}
	if fnErr != nil && (errors.Is(cause, ErrClosed) || errors.Is(cause, ErrMaxHold)) && echo(cause) {
		return fmt.Errorf("locks: hold %q: %w", key, cause)
	}
	return fnErr
}

// jitter picks a wait uniformly between d/2 and d.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Keyed is the engine as a keyed mutex of functions of a context alone
// (their lease unused): the shape of a caller such as intent.Locker that
// knows nothing of leases.
type Keyed struct{ E *Engine }

// Hold holds key while fn runs, as Engine.Hold does.
func (k Keyed) Hold(ctx context.Context, key string, fn func(context.Context) error) error {
	return k.E.Hold(ctx, key, func(ctx context.Context, _ *Lease) error { return fn(ctx) })
}
