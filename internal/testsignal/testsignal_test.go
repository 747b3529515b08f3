package testsignal_test

import (
	"sync/atomic"
	"testing"

	"studio/internal/testsignal"
)

// TestSignalDropsWhenFull: Signal never blocks; Wait takes the values in
// order.
func TestSignalDropsWhenFull(t *testing.T) {
	t.Parallel()
	s := testsignal.New[int](2)
	for i := range 3 {
		s.Signal(i) // the third is dropped, not waited on
	}
	if a, b := s.Wait(t, "first"), s.Wait(t, "second"); a != 0 || b != 1 {
		t.Fatalf("got %d, %d, want 0, 1", a, b)
	}
	select {
	case v := <-s.C():
		t.Fatalf("a dropped value came through: %d", v)
	default:
	}
}

// TestUntilWakesOnNotify: Until checks its condition at once and again
// after each Notify, from another goroutine, and returns once it holds.
func TestUntilWakesOnNotify(t *testing.T) {
	t.Parallel()
	var c testsignal.Changes
	var n atomic.Int32
	checks := testsignal.New[struct{}](16)
	go func() {
		for range 3 {
			<-checks.C()
			n.Add(1)
			c.Notify()
		}
	}()
	calls := 0
	c.Until(t, "n to reach 3", func() bool {
		calls++
		checks.Signal(struct{}{})
		return n.Load() == 3
	})
	if calls < 2 || n.Load() != 3 {
		t.Fatalf("%d checks, n = %d", calls, n.Load())
	}
}
