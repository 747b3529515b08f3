package store

import (
	"context"
	"sync"
	"time"

	"studio/intent"
)

// Cache is a Store that remembers what the request path reads again and
// again: a token's actor, a request id's binding, and a batch that has
// ended. The same wrapper runs on every engine, so they behave the same.
//
// Each of these values changes only by a deletion (a token revoked, a
// batch deleted or pruned), and every such write bumps the store's cache
// epoch in its own transaction. So:
//
//   - A write made through this Cache forgets at once (the write that
//     makes a value stale invalidates it).
//   - A write made by another process (another instance, `studio token
//     revoke`, `studio prune`) is seen within MaxAge: a value is answered
//     from memory only while the epoch was read less than MaxAge ago, and
//     a changed epoch forgets everything. A token's expiry is checked on
//     every use, and its entry lasts no longer than the hour of use it
//     recorded, so that last-used stays true to the hour.
//
// Misses are never remembered: a value created by another process is
// found at once.
type Cache struct {
	Store
	maxAge time.Duration
	now    func() time.Time
	max    int

	mu        sync.Mutex
	gen       uint64 // bumped by every forget: fills read before it are dropped
	epoch     int64
	checked   bool
	checkedAt time.Time
	tokens    map[string]Token
	bindings  map[bindingKey]intent.Binding
	batches   map[batchKey]intent.Batch
}

type bindingKey struct{ actor, requestID string }

type batchKey struct{ actor, id string }

// CacheConfig configures a Cache.
type CacheConfig struct {
	// MaxAge bounds how long a value deleted by another process may still
	// be answered: 1s by default.
	MaxAge time.Duration
	// Entries bounds each map; 16384 by default.
	Entries int
	// Now is the clock; time.Now by default.
	Now func() time.Time
}

// DefaultCacheMaxAge is the staleness bound of a Cache across processes.
const DefaultCacheMaxAge = time.Second

// NewCache wraps s.
func NewCache(s Store, cfg CacheConfig) *Cache {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultCacheMaxAge
	}
	if cfg.Entries <= 0 {
		cfg.Entries = 1 << 14
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Cache{Store: s, maxAge: cfg.MaxAge, now: cfg.Now, max: cfg.Entries}
	c.forgetLocked()
	return c
}

// forgetLocked drops every value; c.mu is held (or c not yet shared).
func (c *Cache) forgetLocked() {
	c.gen++
	c.tokens = map[string]Token{}
	c.bindings = map[bindingKey]intent.Binding{}
	c.batches = map[batchKey]intent.Batch{}
}

// forget drops every value, after a write through c that can stale one.
func (c *Cache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked()
}

// fresh reads the epoch when the last read is MaxAge old, forgets if it
// moved, and answers the generation a fill must still find to be kept.
func (c *Cache) fresh(ctx context.Context) (uint64, error) {
	start := c.now()
	c.mu.Lock()
	if c.checked && start.Sub(c.checkedAt) < c.maxAge {
		g := c.gen
		c.mu.Unlock()
		return g, nil
	}
	c.mu.Unlock()
	e, err := c.Store.CacheEpoch(ctx)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.checked || e != c.epoch {
		c.forgetLocked()
		c.epoch = e
	}
	c.checked, c.checkedAt = true, start
	return c.gen, nil
}

// put adds v under k to m if no forget came since generation g.
func put[K comparable, V any](c *Cache, g uint64, m map[K]V, k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != g {
		return
	}
	if _, ok := m[k]; !ok && len(m) >= c.max {
		for old := range m {
			delete(m, old)
			break
		}
	}
	m[k] = v
}

func get[K comparable, V any](c *Cache, m map[K]V, k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := m[k]
	return v, ok
}

// ActorForToken answers a remembered live token's actor, or asks the
// store (which records the use to the hour).
func (c *Cache) ActorForToken(ctx context.Context, tokenHash string) (string, error) {
	g, err := c.fresh(ctx)
	if err != nil {
		return "", err
	}
	now := c.now()
	if t, ok := get(c, c.tokens, tokenHash); ok && t.Live(now) && !Hour(now).After(t.LastUsedAt) {
		return t.Actor, nil
	}
	t, err := c.Store.UseToken(ctx, tokenHash)
	if err != nil {
		return "", err
	}
	put(c, g, c.tokens, tokenHash, t)
	return t.Actor, nil
}

// UseToken is ActorForToken's whole answer, never remembered.
func (c *Cache) UseToken(ctx context.Context, tokenHash string) (Token, error) {
	return c.Store.UseToken(ctx, tokenHash)
}

// RevokeToken revokes, then forgets.
func (c *Cache) RevokeToken(ctx context.Context, id string) (Token, error) {
	t, err := c.Store.RevokeToken(ctx, id)
	c.forget()
	return t, err
}

// LookupIntent answers a remembered binding, or reads it.
func (c *Cache) LookupIntent(ctx context.Context, actor, requestID string) (intent.Binding, error) {
	g, err := c.fresh(ctx)
	if err != nil {
		return intent.Binding{}, err
	}
	k := bindingKey{actor, requestID}
	if b, ok := get(c, c.bindings, k); ok {
		return b, nil
	}
	b, err := c.Store.LookupIntent(ctx, actor, requestID)
	if err != nil {
		return intent.Binding{}, err
	}
	put(c, g, c.bindings, k, b)
	return b, nil
}

// GetBatch answers a remembered ended batch, or reads it (and remembers
// it once it has ended: nothing of an ended batch changes but its
// deletion).
func (c *Cache) GetBatch(ctx context.Context, actor, id string) (intent.Batch, error) {
	g, err := c.fresh(ctx)
	if err != nil {
		return intent.Batch{}, err
	}
	k := batchKey{actor, id}
	if b, ok := get(c, c.batches, k); ok {
		return b, nil
	}
	b, err := c.Store.GetBatch(ctx, actor, id)
	if err != nil {
		return intent.Batch{}, err
	}
	if b.TaskCount > 0 && b.Counts.Ended() == b.TaskCount {
		put(c, g, c.batches, k, b)
	}
	return b, nil
}

// DeleteBatch deletes, then forgets.
func (c *Cache) DeleteBatch(ctx context.Context, actor, id string) (Deleted, error) {
	d, err := c.Store.DeleteBatch(ctx, actor, id)
	c.forget()
	return d, err
}
