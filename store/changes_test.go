package store

import (
	"fmt"
	"sync"
	"testing"
)

// TestChangeSignal: a Notify closes the channels of its batches' waiters
// and no other; a later Wait gets a new channel; released waiters leave
// nothing behind; and waiters and notifiers racing from many goroutines
// end with an empty signal.
func TestChangeSignal(t *testing.T) {
	t.Parallel()
	var s ChangeSignal
	a1, ra1 := s.Wait("a")
	a2, ra2 := s.Wait("a")
	b, rb := s.Wait("b")
	s.NotifyMoved(CountDeltas{"a": {}, "c": {}})
	for i, ch := range []<-chan struct{}{a1, a2} {
		select {
		case <-ch:
		default:
			t.Fatalf("waiter %d of a not woken", i)
		}
	}
	select {
	case <-b:
		t.Fatal("b woken by a's notify")
	default:
	}
	a3, ra3 := s.Wait("a")
	select {
	case <-a3:
		t.Fatal("a wait after the notify is already woken")
	default:
	}
	ra1()
	ra2()
	ra2() // twice is once
	ra3()
	rb()
	if n := s.waiting.Load(); n != 0 || len(s.w) != 0 {
		t.Fatalf("after every release: %d waiting, %d batches", n, len(s.w))
	}

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			id := fmt.Sprint("batch-", g%4)
			for range 500 {
				ch, release := s.Wait(id)
				s.Notify(id)
				<-ch // its own notify, or an earlier one's, woke it
				release()
			}
		})
	}
	wg.Wait()
	if n := s.waiting.Load(); n != 0 || len(s.w) != 0 {
		t.Fatalf("after the race: %d waiting, %d batches", n, len(s.w))
	}
}
