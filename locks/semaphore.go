package locks

import (
	"context"
	"fmt"
)

// Semaphore lets up to Limit holders hold a key at once, across every
// process sharing the store, with the same API as the engine's locks.
// Semaphore keys are a key space of their own: a semaphore "k" and a lock
// "k" do not see each other. A key has one limit: while it has holders
// under one limit, an acquisition under another fails with
// ErrLimitConflict.
type Semaphore struct {
	e     *Engine
	limit int
}

// Semaphore returns a semaphore of limit holders per key on this engine.
// It shares the engine's store, defaults, waiter queues and Close. A limit
// below 1 panics (with an error matching ErrInvalid), as make does with a
// negative size: check a limit that comes from outside with CheckLimit.
func (e *Engine) Semaphore(limit int) *Semaphore {
	if err := CheckLimit(limit); err != nil {
		panic(fmt.Errorf("locks: semaphore: %w", err))
	}
	return &Semaphore{e: e, limit: limit}
}

// target is a slot of this semaphore.
func (s *Semaphore) target() target { return target{limit: s.limit} }

// Limit returns how many holders a key may have at once.
func (s *Semaphore) Limit() int { return s.limit }

// Hold waits for one of key's slots, runs fn holding it and releases it;
// everything else is as Engine.Hold.
func (s *Semaphore) Hold(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	_, err := s.e.hold(ctx, s.target(), key, fn, s.e.defaults, opts, false)
	return err
}

// TryHold runs fn holding one of key's slots only if one is free now and
// no waiter of this engine is queued for the key; as Engine.TryHold.
func (s *Semaphore) TryHold(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...Option) (ran bool, err error) {
	return s.e.hold(ctx, s.target(), key, fn, s.e.defaults, opts, true)
}
