package locks

import (
	"fmt"
	"testing"
	"time"
)

// TestMemorySweepBoundsEntries: released entries stay for their key's next
// holder but are swept as the map grows, so keys nobody comes back to do
// not pile up; a key acquired in the acquisition that sweeps is held.
func TestMemorySweepBoundsEntries(t *testing.T) {
	m := NewMemoryStore()
	ctx := t.Context()
	for i := range 10000 {
		key := fmt.Sprintf("k%d", i)
		if _, ok, err := m.Acquire(ctx, key, "a", time.Hour); !ok || err != nil {
			t.Fatalf("Acquire(%s): %v, %v", key, ok, err)
		}
		// Every acquisition, sweeping or not, holds its key.
		if _, ok, err := m.Acquire(ctx, key, "b", time.Hour); ok || err != nil {
			t.Fatalf("second Acquire(%s): %v, %v; want refused", key, ok, err)
		}
		if ok, err := m.Release(ctx, key, "a"); !ok || err != nil {
			t.Fatalf("Release(%s): %v, %v", key, ok, err)
		}
	}
	m.mu.Lock()
	n := len(m.locks)
	m.mu.Unlock()
	if n > 2*64+1 {
		t.Fatalf("%d entries kept after 10000 keys were taken and released, want at most %d", n, 2*64+1)
	}
}

// TestMemorySweepBoundsSlotKeys: the same for semaphore keys, whose empty
// slot maps stay for their next holder until a sweep.
func TestMemorySweepBoundsSlotKeys(t *testing.T) {
	m := NewMemoryStore()
	ctx := t.Context()
	for i := range 10000 {
		key := fmt.Sprintf("k%d", i)
		if _, ok, err := m.AcquireSlot(ctx, key, "a", 1, time.Hour); !ok || err != nil {
			t.Fatalf("AcquireSlot(%s): %v, %v", key, ok, err)
		}
		if _, ok, err := m.AcquireSlot(ctx, key, "b", 1, time.Hour); ok || err != nil {
			t.Fatalf("second AcquireSlot(%s): %v, %v; want refused", key, ok, err)
		}
		if ok, err := m.ReleaseSlot(ctx, key, "a"); !ok || err != nil {
			t.Fatalf("ReleaseSlot(%s): %v, %v", key, ok, err)
		}
	}
	m.mu.Lock()
	n := len(m.slots)
	m.mu.Unlock()
	if n > 2*64+1 {
		t.Fatalf("%d semaphore keys kept after 10000 were taken and released, want at most %d", n, 2*64+1)
	}
}
