package locks

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// cleanupTimeout bounds the release that follows an acquisition whose
// outcome is unknown.
const cleanupTimeout = 30 * time.Second

// errReleased is the cause of fn's context once fn has returned and the
// lease is being released, for goroutines fn left behind.
var errReleased = errors.New("locks: lease released")

// Engine grants leases on keys of one Store: Hold and TryHold for locks (one
// holder per key), Semaphore for up to N holders. Waiters of this engine on
// one key are served first come, first served; waiters in other engines or
// processes compete through the store. An Engine is safe for concurrent use.
type Engine struct {
	store    Store
	defaults settings

	mu     sync.Mutex
	queues map[queueKey]*queue
	spare  *queue // a dropped queue, kept for the next key
	active *Lease // running leases, linked through prev and next
	closed bool
	done   chan struct{} // closed by Close
	holds  sync.WaitGroup

	unsubscribe func() // from a Notifier store

	renewals   renewHeap   // running leases by next renewal
	renewTimer *time.Timer // fires at armedAt (zero: not armed)
	armedAt    time.Time
}

// New returns an engine over store. The options become the defaults of
// every hold; an invalid one makes every hold fail with ErrInvalid. If the
// store is a Notifier, a release in another process wakes this engine's
// first waiter of the key at once; polling stays the fallback.
func New(store Store, opts ...Option) *Engine {
	e := &Engine{
		store:    store,
		defaults: defaultSettings().with(opts),
		queues:   make(map[queueKey]*queue),
		done:     make(chan struct{}),
	}
	if n, ok := store.(Notifier); ok {
		e.unsubscribe = n.Subscribe(e.released)
	}
	return e
}

// released wakes the first waiter of a key that another process released.
func (e *Engine) released(slot bool, key string) {
	e.mu.Lock()
	if q := e.queues[queueKey{slot: slot, key: key}]; q != nil {
		q.wakeFront()
	}
	e.mu.Unlock()
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
// waiter of this engine queued for it. It reports whether fn ran; err is as
// Hold's when it ran, or the store's error when asking failed.
func (e *Engine) TryHold(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...Option) (ran bool, err error) {
	return e.hold(ctx, target{}, key, fn, e.defaults, opts, true)
}

// Close ends the engine: every waiter returns ErrClosed, every running fn's
// context ends with cause ErrClosed, and Close returns once every Hold has
// released its lease and returned. Later holds fail with ErrClosed. Close
// may be called more than once; it must not be called from inside fn.
func (e *Engine) Close() error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.done)
		for l := e.active; l != nil; l = l.next {
			l.cancel(ErrClosed)
		}
	}
	e.mu.Unlock()
	e.holds.Wait()
	e.mu.Lock()
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

// queueKey names a key's queue: locks and semaphores are separate key
// spaces, as in the store.
type queueKey struct {
	slot bool
	key  string
}

// queue is this engine's state for one key: its waiters in arrival order
// and how many of its leases this engine holds. Only the caller at the
// front asks the store, one at a time, and only while held is below the
// capacity; so this engine never races itself for a key, and a release here
// wakes exactly the next waiter in line. It exists while it has waiters,
// holders or someone asking.
type queue struct {
	waiters list.List // of *waiter
	held    int
	asking  bool // a caller at the front is asking the store
}

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

// enter counts a hold in, unless the engine is closed.
func (e *Engine) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.holds.Add(1)
	return true
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
	if !e.enter() {
		return false, fmt.Errorf("locks: hold %q: %w", key, ErrClosed)
	}
	defer e.holds.Done()
	l, err := e.acquire(ctx, t, key, s)
	if err != nil {
		if try && errors.Is(err, ErrTimeout) {
			return false, nil
		}
		return false, err
	}
	return true, e.run(ctx, l, fn, s)
}

// acquire waits in key's queue until its turn, then asks the store; while
// the store refuses (another process holds the key) it polls with backoff.
//
// A caller that finds the key idle in this engine (no waiter, nobody
// asking, a free slot) asks the store at once without queueing: that is the
// uncontended path, with nothing to allocate for waiting.
func (e *Engine) acquire(ctx context.Context, t target, key string, s settings) (*Lease, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("locks: hold %q: %w", key, context.Cause(ctx))
	}
	qk := queueKey{slot: t.limit > 0, key: key}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, fmt.Errorf("locks: hold %q: %w", key, ErrClosed)
	}
	q := e.queues[qk]
	if q == nil {
		q, e.spare = e.spare, nil
		if q == nil {
			q = &queue{}
		}
		e.queues[qk] = q
	}
	var w *waiter
	askNow := true
	if q.waiters.Len() == 0 && !q.asking && q.held < t.capacity() {
		q.asking = true
		e.mu.Unlock()
		l, err := e.try(ctx, t, key, s)
		e.mu.Lock()
		q.asking = false
		if err != nil || l != nil || s.wait == 0 {
			q.wakeFront()
			if l != nil {
				return e.granted(ctx, q, l) // unlocks
			}
			e.drop(qk, q)
			e.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return nil, &TimeoutError{Key: key, Wait: 0}
		}
		// Held elsewhere: wait at the front of the line, where this
		// caller came, and poll before asking again.
		w = &waiter{wake: make(chan struct{}, 1)}
		w.elem = q.waiters.PushFront(w)
		askNow = false
	} else {
		w = &waiter{wake: make(chan struct{}, 1)}
		w.elem = q.waiters.PushBack(w)
	}
	e.mu.Unlock()

	var deadline <-chan time.Time
	if s.wait > 0 {
		timer := time.NewTimer(s.wait)
		defer timer.Stop()
		deadline = timer.C
	}
	var poll *time.Timer
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	var pollC <-chan time.Time
	backoff := s.pollMin
	pollLater := func() {
		d := jitter(backoff)
		backoff = min(2*backoff, s.pollMax)
		if poll == nil {
			poll = time.NewTimer(d)
		} else {
			poll.Reset(d)
		}
		pollC = poll.C
	}
	if !askNow {
		pollLater()
	}
	for {
		if askNow {
			e.mu.Lock()
			turn := q.waiters.Front() == w.elem && !q.asking && q.held < t.capacity()
			q.asking = q.asking || turn
			e.mu.Unlock()
			if turn {
				l, err := e.try(ctx, t, key, s)
				e.mu.Lock()
				q.asking = false
				switch {
				case err != nil:
					e.leaveLocked(qk, q, w)
					e.mu.Unlock()
					return nil, err
				case l != nil:
					q.waiters.Remove(w.elem)
					q.wakeFront()               // a semaphore's next waiter may take another slot
					return e.granted(ctx, q, l) // unlocks
				case s.wait == 0:
					e.leaveLocked(qk, q, w)
					e.mu.Unlock()
					return nil, &TimeoutError{Key: key, Wait: 0}
				}
				e.mu.Unlock()
				// Held elsewhere: nothing here will say when it is free.
				pollLater()
			} else if s.wait == 0 {
				e.leave(qk, q, w)
				return nil, &TimeoutError{Key: key, Wait: 0}
			}
			// Not our turn: a release or a departure here wakes us.
		}
		select {
		case <-w.wake:
			backoff = s.pollMin
			if poll != nil {
				poll.Stop()
			}
			pollC = nil
			askNow = true
		case <-pollC:
			pollC = nil
			askNow = true
		case <-deadline:
			e.leave(qk, q, w)
			return nil, &TimeoutError{Key: key, Wait: s.wait}
		case <-ctx.Done():
			e.leave(qk, q, w)
			return nil, fmt.Errorf("locks: hold %q: %w", key, context.Cause(ctx))
		case <-e.done:
			e.leave(qk, q, w)
			return nil, fmt.Errorf("locks: hold %q: %w", key, ErrClosed)
		}
	}
}

// try asks the store once for key under a fresh owner. It answers nil, nil
// when the store refused. The caller's context goes to the store as is: if
// it ends during the call, or the call fails otherwise, the outcome is
// unknown, so try gives back whatever may have been taken (a release by an
// owner that holds nothing changes nothing).
func (e *Engine) try(ctx context.Context, t target, key string, s settings) (*Lease, error) {
	owner := newOwner()
	sent := time.Now()
	fence, ok, err := t.acquire(ctx, e.store, key, owner, s.ttl)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_, _ = t.release(rctx, e.store, key, owner)
		cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("locks: hold %q: %w", key, context.Cause(ctx))
		}
		return nil, fmt.Errorf("locks: acquire %q: %w", key, err)
	}
	if !ok {
		return nil, nil
	}
	base := ctx
	if ctx.Done() != nil {
		base = context.WithoutCancel(ctx)
	}
	return &Lease{
		key: key, owner: owner, fence: fence, t: t, ttl: s.ttl,
		base: base, expires: sent.Add(s.ttl), idx: -1,
	}, nil
}

// granted counts the new lease among the holders, unless the caller or the
// engine went away meanwhile: then it gives the lease back. e.mu is held
// and granted unlocks it.
func (e *Engine) granted(ctx context.Context, q *queue, l *Lease) (*Lease, error) {
	q.held++
	l.qk, l.q = queueKey{slot: l.t.limit > 0, key: l.key}, q
	closed := e.closed
	e.mu.Unlock()
	var cause error
	switch {
	case closed:
		cause = ErrClosed
	case ctx.Err() != nil:
		cause = context.Cause(ctx)
	default:
		return l, nil
	}
	err := fmt.Errorf("locks: hold %q: %w", l.key, cause)
	if rerr := e.release(l); rerr != nil {
		err = errors.Join(err, fmt.Errorf("%w %q: %w", ErrRelease, l.key, rerr))
	}
	return nil, err
}

// leave takes a waiter out of its queue, passing the turn on if it had it.
func (e *Engine) leave(qk queueKey, q *queue, w *waiter) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leaveLocked(qk, q, w)
}

func (e *Engine) leaveLocked(qk queueKey, q *queue, w *waiter) {
	front := q.waiters.Front() == w.elem
	q.waiters.Remove(w.elem)
	if front {
		q.wakeFront()
	}
	e.drop(qk, q)
}

// drop forgets an idle queue. e.mu is held.
func (e *Engine) drop(qk queueKey, q *queue) {
	if q.held == 0 && q.waiters.Len() == 0 && !q.asking && e.queues[qk] == q {
		delete(e.queues, qk)
		e.spare = q // idle and empty: the next new queue can be this one
	}
}

// release gives the lease back to the store and the turn to the next
// waiter. A lease the store no longer has (it expired) is not an error.
//
// The call carries the hold's context without its cancel (the caller may
// have gone: the key must still be given back) and without a deadline of
// its own; a store bounds its calls itself (SQLite: busy_timeout).
func (e *Engine) release(l *Lease) error {
	_, err := l.t.release(l.base, e.store, l.key, l.owner)
	e.mu.Lock()
	if l.cancel != nil { // it ran: take it off the running list
		if l.prev != nil {
			l.prev.next = l.next
		} else {
			e.active = l.next
		}
		if l.next != nil {
			l.next.prev = l.prev
		}
		l.prev, l.next = nil, nil
	}
	l.q.held--
	l.q.wakeFront()
	e.drop(l.qk, l.q)
	e.mu.Unlock()
	return err
}

// run calls fn with the lease, renewing it meanwhile, and releases it.
func (e *Engine) run(ctx context.Context, l *Lease, fn func(context.Context, *Lease) error, s settings) (err error) {
	lctx, cancel := context.WithCancelCause(ctx)
	fctx := lctx
	if s.maxHold > 0 {
		var cancelMax context.CancelFunc
		fctx, cancelMax = context.WithTimeoutCause(lctx, s.maxHold, ErrMaxHold)
		defer cancelMax()
	}
	e.mu.Lock()
	l.cancel = cancel
	l.next = e.active
	if e.active != nil {
		e.active.prev = l
	}
	e.active = l
	if e.closed {
		cancel(ErrClosed)
	}
	e.schedule(l, l.expires.Add(l.ttl/3-l.ttl)) // sent + ttl/3
	e.mu.Unlock()

	returned := false
	defer func() {
		// Runs on return, panic or Goexit alike. fn's context ends before
		// the key is free, so whatever fn left running sees it first.
		var cause error
		if fctx.Err() != nil {
			cause = context.Cause(fctx)
		}
		lost := e.stopRenewal(l)
		cancel(errReleased)
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

// newOwner draws 128 random bits for one acquisition, as 32 hex digits.
// math/rand/v2's generator is ChaCha8, seeded by the runtime from the
// operating system: owners are unique with overwhelming odds and cost no
// system call.
func newOwner() string {
	const digits = "0123456789abcdef"
	var b [32]byte
	for i, x := range [2]uint64{rand.Uint64(), rand.Uint64()} {
		for j := range 16 {
			b[i*16+j] = digits[x>>(60-4*j)&0xf]
		}
	}
	return string(b[:])
}
