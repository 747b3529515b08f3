package locks

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MemoryStore is a Store inside one process: a map under a mutex. Engines
// sharing it exclude each other; other processes do not see it.
//
// Its clock is time.Now, whose monotonic reading measures the leases (a
// step of the wall clock moves no expiry), or the one given to
// NewMemoryStoreClock. Fences
// are one counter for every key, seeded from the wall clock: each is
// max(last+1, now in microseconds), so they keep growing across restarts
// of the process as long as the clock does not step back and acquisitions
// average under one per microsecond, and reach MaxFence only in the year
// 2255.
type MemoryStore struct {
	now func() time.Time

	mu        sync.Mutex
	locks     map[string]*memLease           // released and expired entries stay until a sweep
	slots     map[string]map[string]memLease // key -> owner -> slot
	fence     int64
	swept     int // size of the maps after the last sweep
	sweptSlot int
}

type memLease struct {
	owner   string
	fence   int64
	expires time.Time
	limit   int // of a semaphore slot
}

// live reports whether the lease is held at now.
func (m memLease) live(now time.Time) bool { return now.Before(m.expires) }

// NewMemoryStore returns an empty store on time.Now's clock.
func NewMemoryStore() *MemoryStore { return NewMemoryStoreClock(time.Now) }

// NewMemoryStoreClock returns an empty store whose clock is now, for tests
// that move time by hand.
func NewMemoryStoreClock(now func() time.Time) *MemoryStore {
	return &MemoryStore{
		now:   now,
		locks: make(map[string]*memLease),
		slots: make(map[string]map[string]memLease),
	}
}

// nextFence draws a fence. m.mu is held.
func (m *MemoryStore) nextFence(now time.Time) (int64, error) {
	f := max(m.fence+1, now.UnixMicro())
	if f > MaxFence || f < 1 {
		return 0, ErrFenceExhausted
	}
	m.fence = f
	return f, nil
}

// Acquire implements Store.
func (m *MemoryStore) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	cur := m.locks[key]
	if cur != nil && cur.live(now) {
		return 0, false, nil
	}
	f, err := m.nextFence(now)
	if err != nil {
		return 0, false, fmt.Errorf("acquire: %w", err)
	}
	if cur == nil {
		m.sweep(now) // before the new entry, which is not live yet
		cur = &memLease{}
		m.locks[key] = cur
	}
	*cur = memLease{owner: owner, fence: f, expires: now.Add(ttl)}
	return f, true, nil
}

// Renew implements Store.
func (m *MemoryStore) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	cur := m.locks[key]
	if cur == nil || cur.owner != owner || !cur.live(now) {
		return false, nil
	}
	cur.expires = now.Add(ttl)
	return true, nil
}

// Release implements Store.
func (m *MemoryStore) Release(ctx context.Context, key, owner string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.locks[key]
	if cur == nil || cur.owner != owner {
		return false, nil
	}
	live := cur.live(m.now())
	*cur = memLease{} // free; the entry stays for the key's next holder
	return live, nil
}

// AcquireSlot implements Store.
func (m *MemoryStore) AcquireSlot(ctx context.Context, key, owner string, limit int, ttl time.Duration) (int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	if err := CheckLimit(limit); err != nil {
		return 0, false, fmt.Errorf("acquire slot: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	held := m.slots[key]
	for o, s := range held {
		if !s.live(now) {
			delete(held, o)
		}
	}
	for _, s := range held {
		if s.limit != limit {
			return 0, false, LimitConflict(key, s.limit, limit)
		}
		break
	}
	if len(held) >= limit {
		return 0, false, nil
	}
	if _, dup := held[owner]; dup {
		return 0, false, fmt.Errorf("acquire slot: %w: owner %q already holds a slot", ErrInvalid, owner)
	}
	f, err := m.nextFence(now)
	if err != nil {
		return 0, false, fmt.Errorf("acquire slot: %w", err)
	}
	if held == nil {
		m.sweep(now) // before the new map, which is empty
		held = make(map[string]memLease)
		m.slots[key] = held
	}
	held[owner] = memLease{owner: owner, fence: f, expires: now.Add(ttl), limit: limit}
	return f, true, nil
}

// RenewSlot implements Store.
func (m *MemoryStore) RenewSlot(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	cur, ok := m.slots[key][owner]
	if !ok || !cur.live(now) {
		return false, nil
	}
	cur.expires = now.Add(ttl)
	m.slots[key][owner] = cur
	return true, nil
}

// ReleaseSlot implements Store.
func (m *MemoryStore) ReleaseSlot(ctx context.Context, key, owner string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.slots[key]
	cur, ok := held[owner]
	if !ok {
		return false, nil
	}
	delete(held, owner) // an empty map stays for the key's next holder, until a sweep
	return cur.live(m.now()), nil
}

// Inspect implements Store.
func (m *MemoryStore) Inspect(ctx context.Context, key string) (KeyState, error) {
	if err := ctx.Err(); err != nil {
		return KeyState{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	st := KeyState{Now: now}
	if cur := m.locks[key]; cur != nil && cur.live(now) {
		st.Holders = []Holder{{Fence: cur.fence, Expires: cur.expires, Left: cur.expires.Sub(now)}}
	}
	return st, nil
}

// InspectSlots implements Store.
func (m *MemoryStore) InspectSlots(ctx context.Context, key string) (KeyState, error) {
	if err := ctx.Err(); err != nil {
		return KeyState{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	st := KeyState{Now: now}
	for _, s := range m.slots[key] {
		if s.live(now) {
			st.Holders = append(st.Holders, Holder{Fence: s.fence, Expires: s.expires, Left: s.expires.Sub(now)})
			st.Limit = s.limit
		}
	}
	slices.SortFunc(st.Holders, func(a, b Holder) int { return cmp.Compare(a.Fence, b.Fence) })
	return st, nil
}

// sweep drops expired leases once the maps have doubled since the last
// sweep, so that keys nobody comes back to do not pile up; amortized O(1)
// per acquisition. m.mu is held.
func (m *MemoryStore) sweep(now time.Time) {
	if len(m.locks) > 2*m.swept+64 {
		for k, l := range m.locks {
			if !l.live(now) {
				delete(m.locks, k)
			}
		}
		m.swept = len(m.locks)
	}
	if len(m.slots) > 2*m.sweptSlot+64 {
		for k, held := range m.slots {
			for o, s := range held {
				if !s.live(now) {
					delete(held, o)
				}
			}
			if len(held) == 0 {
				delete(m.slots, k)
			}
		}
		m.sweptSlot = len(m.slots)
	}
}

// len reports how many locks and semaphore keys have live leases, for
// tests.
func (m *MemoryStore) len() (locks, slots int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for _, l := range m.locks {
		if l.live(now) {
			locks++
		}
	}
	for _, held := range m.slots {
		for _, s := range held {
			if s.live(now) {
				slots++
				break
			}
		}
	}
	return locks, slots
}
