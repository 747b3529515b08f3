package locks

import (
	"context"
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

// TestEngineSweepBoundsQueues: the engine's per-key queues of keys no one
// holds or waits for are swept as the maps double, for locks and
// semaphores alike, so an engine that saw 10000 keys keeps a bounded
// number of queues.
func TestEngineSweepBoundsQueues(t *testing.T) {
	e := New(NewMemoryStore())
	defer e.Close()
	ctx := t.Context()
	noop := func(context.Context, *Lease) error { return nil }
	for i := range 10000 {
		if err := e.Hold(ctx, fmt.Sprintf("k%d", i), noop); err != nil {
			t.Fatal(err)
		}
		if err := e.Semaphore(2).Hold(ctx, fmt.Sprintf("s%d", i), noop); err != nil {
			t.Fatal(err)
		}
	}
	e.mu.Lock()
	n := len(e.queues[0]) + len(e.queues[1])
	e.mu.Unlock()
	if n > 2*64+2 {
		t.Fatalf("%d queues kept after 20000 keys were held and released, want at most %d", n, 2*64+2)
	}
}
