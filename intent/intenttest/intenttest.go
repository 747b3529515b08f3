// Package intenttest holds test doubles for the ports of package intent.
package intenttest

import (
	"context"
	"sync"
)

// KeyedMutex is a minimal intent.Locker: one in-process mutex per key.
// Its zero value is ready to use.
type KeyedMutex struct {
	mu   sync.Mutex
	keys map[string]*sync.Mutex
}

// Hold runs fn while holding the mutex of key.
func (k *KeyedMutex) Hold(ctx context.Context, key string, fn func(context.Context) error) error {
	k.mu.Lock()
	if k.keys == nil {
		k.keys = map[string]*sync.Mutex{}
	}
	m := k.keys[key]
	if m == nil {
		m = &sync.Mutex{}
		k.keys[key] = m
	}
	k.mu.Unlock()
	m.Lock()
	defer m.Unlock()
	return fn(ctx)
}
