package worker_test

import (
	"context"
	"sync"

	"studio/intent"
	"studio/internal/testsignal"
	"studio/store"
)

// ledger records, across the pools of a test, the fences claimed and the
// writes that succeeded, and tells of each change.
type ledger struct {
	mu          sync.Mutex
	maxClaimed  map[string]int64   // task -> highest fence claimed
	claims      map[string]int     // task -> claims
	completions map[string][]int64 // task -> fences of successful completions
	writes      map[string]int     // pool -> successful writes (steps, completions, failures, releases)
	claimsBy    map[string]int     // pool -> tasks claimed
	changed     testsignal.Changes
}

func newLedger() *ledger {
	return &ledger{maxClaimed: map[string]int64{}, claims: map[string]int{}, completions: map[string][]int64{},
		writes: map[string]int{}, claimsBy: map[string]int{}}
}

// await waits, in a pool's goroutine, until cond (called with l.mu held)
// holds or done is closed; it answers whether cond held.
func (l *ledger) await(done <-chan struct{}, cond func() bool) bool {
	for {
		ch := l.changed.Next()
		l.mu.Lock()
		ok := cond()
		l.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

// spy wraps a pool's store: it records into a ledger, can freeze every call
// (a stopped process), and can stall renewals (a stalled one).
type spy struct {
	store.TaskStore
	name string
	led  *ledger

	mu   sync.Mutex
	thaw chan struct{} // non-nil while frozen
	// stallUntil, when set, makes every renewal hang until each of its
	// leases has ended or been claimed again, or the channel is closed.
	stallUntil <-chan struct{}
}

func newSpy(s store.TaskStore, name string, led *ledger) *spy {
	return &spy{TaskStore: s, name: name, led: led}
}

func (s *spy) freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.thaw == nil {
		s.thaw = make(chan struct{})
	}
}

func (s *spy) unfreeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.thaw != nil {
		close(s.thaw)
		s.thaw = nil
	}
}

func (s *spy) gate() {
	s.mu.Lock()
	ch := s.thaw
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (s *spy) wrote(n int) {
	s.led.mu.Lock()
	s.led.writes[s.name] += n
	s.led.mu.Unlock()
	s.led.changed.Notify()
}

func (s *spy) ClaimTasks(ctx context.Context, p store.ClaimParams) ([]store.ClaimedTask, error) {
	s.gate()
	cs, err := s.TaskStore.ClaimTasks(ctx, p)
	s.led.mu.Lock()
	for _, c := range cs {
		s.led.claims[c.ID]++
		s.led.maxClaimed[c.ID] = max(s.led.maxClaimed[c.ID], c.Fence)
	}
	s.led.claimsBy[s.name] += len(cs)
	s.led.mu.Unlock()
	s.led.changed.Notify()
	return cs, err
}

func (s *spy) RenewLeases(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	s.gate()
	s.mu.Lock()
	done := s.stallUntil
	s.mu.Unlock()
	if done != nil && len(p.Leases) > 0 {
		// Stalled, deaf to ctx as a stuck process: the leases lapse (the
		// database's clock runs on) and others claim them again.
		s.led.mu.Lock()
		claimed := map[string]int{}
		for _, l := range p.Leases {
			claimed[l.ID] = s.led.claims[l.ID]
		}
		s.led.mu.Unlock()
		s.led.await(done, func() bool {
			for id, n := range claimed {
				if len(s.led.completions[id]) == 0 && s.led.claims[id] == n {
					return false
				}
			}
			return true
		})
	}
	return s.TaskStore.RenewLeases(ctx, p)
}

func (s *spy) SaveSteps(ctx context.Context, steps []store.StepSave) ([]error, error) {
	s.gate()
	errs, err := s.TaskStore.SaveSteps(ctx, steps)
	n := 0
	for _, e := range errs {
		if e == nil {
			n++
		}
	}
	s.wrote(n)
	return errs, err
}

func (s *spy) CompleteLeases(ctx context.Context, cs []store.Completion) ([]store.CompletionResult, error) {
	s.gate()
	res, err := s.TaskStore.CompleteLeases(ctx, cs)
	n := 0
	s.led.mu.Lock()
	for i, r := range res {
		if r.Err == nil {
			n++
			s.led.completions[cs[i].ID] = append(s.led.completions[cs[i].ID], cs[i].Fence)
		}
	}
	s.led.mu.Unlock()
	s.wrote(n) // and tells of the completions
	return res, err
}

func (s *spy) FailLease(ctx context.Context, f store.Failure) (intent.State, error) {
	s.gate()
	st, err := s.TaskStore.FailLease(ctx, f)
	if err == nil {
		s.wrote(1)
	}
	return st, err
}

func (s *spy) ReleaseLeases(ctx context.Context, ls []store.Lease) ([]error, error) {
	s.gate()
	errs, err := s.TaskStore.ReleaseLeases(ctx, ls)
	n := 0
	for _, e := range errs {
		if e == nil {
			n++
		}
	}
	s.wrote(n)
	return errs, err
}

func (l *ledger) writesOf(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writes[name]
}
