package locks

import (
	"context"
	"fmt"
	"time"
)

// Info is what Inspect tells of one key: its live leases as the store
// sees them, and what this engine knows that the store does not (its
// waiters). Owners are never shown.
type Info struct {
	// Key is the store key inspected (for a named lock, KeyOf(name, id)).
	Key string
	// Semaphore is true for a semaphore key, false for a lock.
	Semaphore bool
	// Limit is how many may hold the key at once: 1 for a lock; for a
	// semaphore the limit its live slots were taken under, else the
	// Semaphore's own (0 when neither is known: InspectSemaphore on a
	// free key).
	Limit int
	// Held is true when at least one live lease holds the key.
	Held bool
	// Free is true when TryHold would find room now: fewer live leases
	// than Limit and no waiter queued in this engine.
	Free bool
	// Holders are the live leases, smallest fence first, each with its
	// fence and expiry by the store's clock.
	Holders []Holder
	// Waiters is how many callers of this engine wait for the key (other
	// engines' waiters are not known to anyone).
	Waiters int
	// HeldHere is how many of the holders are holds of this engine.
	HeldHere int
	// StoreTime is the store's clock when it answered; Holder.Left is
	// measured from it.
	StoreTime time.Time
}

// Inspect tells who holds the lock key (fences and expiries, never
// owners) and how many callers of this engine wait for it. It is a
// snapshot: by the time it returns, the key may have changed hands.
func (e *Engine) Inspect(ctx context.Context, key string) (Info, error) {
	return e.inspect(ctx, target{}, key)
}

// InspectSemaphore is Inspect for the semaphore key, when the caller does
// not have the Semaphore at hand; Limit then comes from the live slots
// (0 when the key is free).
func (e *Engine) InspectSemaphore(ctx context.Context, key string) (Info, error) {
	return e.inspect(ctx, target{limit: -1}, key)
}

// Inspect is Engine.Inspect for the semaphore key.
func (s *Semaphore) Inspect(ctx context.Context, key string) (Info, error) {
	return s.e.inspect(ctx, s.target(), key)
}

// inspect asks the store for key's leases and adds this engine's queue.
// A target with a negative limit is a semaphore of unknown limit.
func (e *Engine) inspect(ctx context.Context, t target, key string) (Info, error) {
	if err := CheckKey(key); err != nil {
		return Info{}, fmt.Errorf("locks: inspect: %w", err)
	}
	slot := t.limit != 0
	var (
		st  KeyState
		err error
	)
	if slot {
		st, err = e.store.InspectSlots(ctx, key)
	} else {
		st, err = e.store.Inspect(ctx, key)
	}
	if err != nil {
		return Info{}, fmt.Errorf("locks: inspect %q: %w", key, err)
	}
	info := Info{Key: key, Semaphore: slot, Limit: 1, Holders: st.Holders, StoreTime: st.Now}
	if slot {
		info.Limit = max(t.limit, 0)
		if st.Limit > 0 {
			info.Limit = st.Limit
		}
	}
	for i := range info.Holders {
		info.Holders[i].Left = info.Holders[i].Expires.Sub(st.Now)
	}
	e.mu.Lock()
	if q := e.queues[space(slot)][key]; q != nil {
		info.Waiters, info.HeldHere = q.waiters.Len(), q.held
	}
	e.mu.Unlock()
	info.Held = len(info.Holders) > 0
	info.Free = info.Waiters == 0 && (len(info.Holders) < info.Limit || info.Limit == 0 && !info.Held)
	return info, nil
}
