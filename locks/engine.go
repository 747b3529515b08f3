package locks

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// storeTimeout bounds one call to the store. The engine calls the store with
// contexts that a caller's cancel does not reach, so that it always learns
// whether an acquisition happened (and gives it back if the caller has gone).
const storeTimeout = 30 * time.Second

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
	leases map[*Lease]struct{}
	closed bool
	done   chan struct{} // closed by Close
	holds  sync.WaitGroup
}

// New returns an engine over store. The options become the defaults of
// every hold; an invalid one makes every hold fail with ErrInvalid.
func New(store Store, opts ...Option) *Engine {
	return &Engine{
		store:    store,
		defaults: defaultSettings().with(opts),
		queues:   make(map[queueKey]*queue),
		leases:   make(map[*Lease]struct{}),
		done:     make(chan struct{}),
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
	_, err := e.hold(ctx, target{}, key, fn, opts, false)
	return err
}

// TryHold runs fn holding key only if key is free now: not held, and no
// waiter of this engine queued for it. It reports whether fn ran; err is as
// Hold's when it ran, or the store's error when asking failed.
func (e *Engine) TryHold(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...Option) (ran bool, err error) {
	return e.hold(ctx, target{}, key, fn, opts, true)
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
		for l := range e.leases {
			if l.cancel != nil {
				l.cancel(ErrClosed)
			}
		}
	}
	e.mu.Unlock()
	e.holds.Wait()
	return nil
}

// ErrRelease wraps a failure to release a lease after fn returned. The key
// stays taken until the lease's TTL runs out; fn's own result is unchanged.
var ErrRelease = errors.New("locks: release failed")

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
// and how many of its leases this engine holds. Only the front waiter asks
// the store, and only while held is below the capacity; so this engine
// never races itself for a key, and a release here wakes exactly the next
// waiter in line. It exists while it has waiters or holders.
type queue struct {
	waiters list.List // of *waiter
	held    int
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

func (e *Engine) hold(ctx context.Context, t target, key string, fn func(context.Context, *Lease) error, opts []Option, try bool) (bool, error) {
	s := e.defaults.with(opts)
	if s.err != nil {
		return false, fmt.Errorf("locks: hold: %w", s.err)
	}
	if err := CheckKey(key); err != nil {
		return false, fmt.Errorf("locks: hold: %w", err)
	}
	if t.limit < 0 {
		return false, fmt.Errorf("locks: hold: %w: semaphore limit %d", ErrInvalid, t.limit)
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
func (e *Engine) acquire(ctx context.Context, t target, key string, s settings) (*Lease, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("locks: hold %q: %w", key, context.Cause(ctx))
	}
	qk := queueKey{slot: t.limit > 0, key: key}
	w := &waiter{wake: make(chan struct{}, 1)}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, fmt.Errorf("locks: hold %q: %w", key, ErrClosed)
	}
	q := e.queues[qk]
	if q == nil {
		q = &queue{}
		e.queues[qk] = q
	}
	w.elem = q.waiters.PushBack(w)
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
	for {
		e.mu.Lock()
		turn := q.waiters.Front() == w.elem && q.held < t.capacity()
		e.mu.Unlock()
		if turn {
			l, err := e.try(ctx, t, key, s)
			if err != nil {
				e.leave(qk, q, w)
				return nil, err
			}
			if l != nil {
				return e.granted(ctx, qk, q, w, l)
			}
			if s.wait == 0 {
				e.leave(qk, q, w)
				return nil, &TimeoutError{Key: key, Wait: 0}
			}
			d := jitter(backoff)
			backoff = min(2*backoff, s.pollMax)
			if poll == nil {
				poll = time.NewTimer(d)
			} else {
				poll.Reset(d)
			}
			pollC = poll.C
		} else if s.wait == 0 {
			e.leave(qk, q, w)
			return nil, &TimeoutError{Key: key, Wait: 0}
		}
		select {
		case <-w.wake:
			backoff = s.pollMin
			if poll != nil {
				poll.Stop()
			}
			pollC = nil
		case <-pollC:
			pollC = nil
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
// when the store refused.
func (e *Engine) try(ctx context.Context, t target, key string, s settings) (*Lease, error) {
	owner := newOwner()
	base := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeout(base, storeTimeout)
	sent := time.Now()
	fence, ok, err := t.acquire(sctx, e.store, key, owner, s.ttl)
	cancel()
	if err != nil {
		// The outcome is unknown: give back whatever may have been taken.
		// A release by an owner that holds nothing changes nothing.
		rctx, cancel := context.WithTimeout(base, storeTimeout)
		_, _ = t.release(rctx, e.store, key, owner)
		cancel()
		return nil, fmt.Errorf("locks: acquire %q: %w", key, err)
	}
	if !ok {
		return nil, nil
	}
	return &Lease{
		key: key, owner: owner, fence: fence, t: t, ttl: s.ttl,
		base: base, expires: sent.Add(s.ttl),
	}, nil
}

// granted moves the waiter's new lease into the holders, unless the caller
// or the engine went away meanwhile: then it gives the lease back.
func (e *Engine) granted(ctx context.Context, qk queueKey, q *queue, w *waiter, l *Lease) (*Lease, error) {
	e.mu.Lock()
	q.waiters.Remove(w.elem)
	q.held++
	l.qk, l.q = qk, q
	q.wakeFront() // a semaphore's next waiter may take another slot
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
	front := q.waiters.Front() == w.elem
	q.waiters.Remove(w.elem)
	if front {
		q.wakeFront()
	}
	e.drop(qk, q)
}

// drop forgets an idle queue. e.mu is held.
func (e *Engine) drop(qk queueKey, q *queue) {
	if q.held == 0 && q.waiters.Len() == 0 && e.queues[qk] == q {
		delete(e.queues, qk)
	}
}

// release gives the lease back to the store and the turn to the next
// waiter. A lease the store no longer has (it expired) is not an error.
func (e *Engine) release(l *Lease) error {
	ctx, cancel := context.WithTimeout(l.base, storeTimeout)
	_, err := l.t.release(ctx, e.store, l.key, l.owner)
	cancel()
	e.mu.Lock()
	delete(e.leases, l)
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
	e.leases[l] = struct{}{}
	if e.closed {
		cancel(ErrClosed)
	}
	e.mu.Unlock()
	r := startRenewal(e.store, l, cancel)

	returned := false
	defer func() {
		// Runs on return, panic or Goexit alike. fn's context ends before
		// the key is free, so whatever fn left running sees it first.
		var cause error
		if fctx.Err() != nil {
			cause = context.Cause(fctx)
		}
		lost := r.stop()
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

// newOwner draws 128 random bits for one acquisition. math/rand/v2's
// generator is ChaCha8, seeded by the runtime from the operating system:
// owners are unique with overwhelming odds and cost no system call.
func newOwner() string {
	var b [32]byte
	out := strconv.AppendUint(b[:0], rand.Uint64(), 36)
	out = append(out, '.')
	out = strconv.AppendUint(out, rand.Uint64(), 36)
	return string(out)
}
