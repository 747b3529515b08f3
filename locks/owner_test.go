package locks

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestOwnerDoesNotPinLease: a memory-store entry whose holder never
// released it (here the release is lost) keeps its owner string, but not
// the Lease, nor through it the hold's context and whatever that context
// carries.
func TestOwnerDoesNotPinLease(t *testing.T) {
	m := NewMemoryStore()
	lost := &hookStore{Store: m, release: func(context.Context, string, string) (bool, error) { return true, nil }}
	e := New(lost)
	defer e.Close()
	collected := make(chan struct{})
	err := e.Hold(t.Context(), "k", func(ctx context.Context, l *Lease) error {
		runtime.AddCleanup(l, func(ch chan struct{}) { close(ch) }, collected)
		return nil
	}, TTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if locks, _ := m.len(); locks != 1 {
		t.Fatalf("store keeps %d live locks, want the unreleased one", locks)
	}
	for range 100 {
		runtime.GC()
		select {
		case <-collected:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the Lease is still reachable after 100 collections: something the store keeps points into it")
}
