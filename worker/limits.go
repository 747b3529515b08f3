package worker

import (
	"context"

	"studio/locks"
)

// Limiter bounds how many tasks of one generator run at once (the
// catalog's max_concurrency).
type Limiter interface {
	// Hold calls fn holding one of the generator's slots, waiting for one
	// while ctx lives. fn's context ends if the slot is lost.
	Hold(ctx context.Context, generatorID string, fn func(ctx context.Context) error) error
}

// Semaphores is a Limiter on the locks engine's semaphores: a generator
// with a limit runs at most that many tasks at once in every process whose
// engine shares the lock store (with the memory lock store: in this
// process); a generator without a limit (absent, or 0) is not bounded.
func Semaphores(e *locks.Engine, limits map[string]int) Limiter {
	s := semaphores{}
	for id, n := range limits {
		if n > 0 {
			s[id] = e.Semaphore(n)
		}
	}
	return s
}

type semaphores map[string]*locks.Semaphore

// SemaphoreKey is the semaphore key of a generator's slots.
func SemaphoreKey(generatorID string) string { return "generator/" + generatorID }

// Hold holds one of the generator's semaphore slots while fn runs.
func (s semaphores) Hold(ctx context.Context, id string, fn func(ctx context.Context) error) error {
	sem, ok := s[id]
	if !ok {
		return fn(ctx)
	}
	return sem.Hold(ctx, SemaphoreKey(id), func(ctx context.Context, _ *locks.Lease) error { return fn(ctx) })
}
