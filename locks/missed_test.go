package locks

import (
	"context"
	"sync"
	"testing"
	"time"
)

// raceStore is a memory store where "another process" holds key k until
// the first Acquire of this engine is under way: that Acquire answers
// "held", and while it is still on its way the other process releases and
// announces it (Notifier), before the asker is in any line.
type raceStore struct {
	*MemoryStore
	mu       sync.Mutex
	released func(slot bool, key string)
	asks     int
}

func (s *raceStore) Subscribe(released func(slot bool, key string)) func() {
	s.mu.Lock()
	s.released = released
	s.mu.Unlock()
	return func() {}
}

func (s *raceStore) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (int64, bool, error) {
	s.mu.Lock()
	s.asks++
	first := s.asks == 1
	s.mu.Unlock()
	if first {
		// The other process's lease, seen by this ask; then its release,
		// announced before the ask's answer is back.
		s.MemoryStore.Acquire(ctx, key, "other", time.Hour)
		fence, ok, err := s.MemoryStore.Acquire(ctx, key, owner, ttl)
		s.MemoryStore.Release(ctx, key, "other")
		s.released(false, key)
		return fence, ok, err
	}
	return s.MemoryStore.Acquire(ctx, key, owner, ttl)
}

// TestReleaseDuringFirstAsk: a release announced while the key's first
// caller is still asking the store is not lost. With polls an hour apart,
// the caller gets the key at once, not after Wait's ten seconds.
func TestReleaseDuringFirstAsk(t *testing.T) {
	t.Parallel()
	st := &raceStore{MemoryStore: NewMemoryStore()}
	e := New(st)
	defer e.Close()
	ran := false
	err := e.Hold(context.Background(), "k", func(context.Context, *Lease) error {
		ran = true
		return nil
	}, PollInterval(time.Hour, time.Hour), Wait(10*time.Second))
	if err != nil || !ran {
		t.Fatalf("hold after a release during the first ask: ran %v, %v", ran, err)
	}
	if st.asks != 2 {
		t.Fatalf("%d asks, want 2", st.asks)
	}
}
