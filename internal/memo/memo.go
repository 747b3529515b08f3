// Package memo is a bounded map for values that never change once known:
// what a cache of them answers is always current, so it needs no
// invalidation, only a bound on its size.
package memo

import "sync"

// Map remembers at most max values; when full, adding a new key forgets
// an arbitrary one. Safe for concurrent use.
type Map[K comparable, V any] struct {
	mu  sync.Mutex
	m   map[K]V
	max int
}

// New is a Map of at most max entries.
func New[K comparable, V any](max int) *Map[K, V] {
	return &Map[K, V]{m: make(map[K]V), max: max}
}

// Get answers the value remembered for k.
func (c *Map[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

// Add remembers v for k.
func (c *Map[K, V]) Add(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = v
}

// Len is how many values are remembered.
func (c *Map[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
