package locks

import "context"

// Semaphore lets up to Limit holders hold a key at once, across every
// process sharing the store, with the same API as the engine's locks.
// Semaphore keys are a key space of their own: a semaphore "k" and a lock
// "k" do not see each other. Use one limit per key everywhere: each
// acquisition checks the count against its own limit.
type Semaphore struct {
	e     *Engine
	limit int
}

// Semaphore returns a semaphore of limit holders per key on this engine
// (limit of at least 1; holds on a smaller one fail with ErrInvalid). It
// shares the engine's store, defaults, waiter queues and Close.
func (e *Engine) Semaphore(limit int) *Semaphore {
	return &Semaphore{e: e, limit: limit}
}

// target is a slot of this semaphore; a limit below 1 becomes one that
// every hold rejects (limit 0 would mean a lock).
func (s *Semaphore) target() target {
	if s.limit < 1 {
		return target{limit: -1}
	}
	return target{limit: s.limit}
}

// Limit returns how many holders a key may have at once.
func (s *Semaphore) Limit() int { return s.limit }

// Hold waits for one of key's slots, runs fn holding it and releases it;
// everything else is as Engine.Hold.
func (s *Semaphore) Hold(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	_, err := s.e.hold(ctx, s.target(), key, fn, opts, false)
	return err
}

// TryHold runs fn holding one of key's slots only if one is free now and
// no waiter of this engine is queued for the key; as Engine.TryHold.
func (s *Semaphore) TryHold(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...Option) (ran bool, err error) {
	return s.e.hold(ctx, s.target(), key, fn, opts, true)
}
