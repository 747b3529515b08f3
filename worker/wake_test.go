package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"studio/generator"
	"studio/intent"
	"studio/internal/testsignal"
	"studio/leasequeue"
	"studio/store"
	"studio/worker"
)

// blocking is a generator whose Wait blocks until its context ends; it
// tells of each Submit and of each Wait's end, with the context's cause.
type blocking struct {
	submitted chan string
	ended     chan error
}

func (b *blocking) ID() string { return "sketch" }

func (b *blocking) Submit(_ context.Context, job generator.Job) (string, error) {
	b.submitted <- job.Key
	return job.Key, nil
}

func (b *blocking) Wait(ctx context.Context, _ string) error {
	<-ctx.Done()
	b.ended <- context.Cause(ctx)
	return ctx.Err()
}

func (b *blocking) Fetch(context.Context, string) (generator.Image, error) {
	return generator.Image{}, errors.New("never fetched")
}

// claimSignal is a store that counts the claims that found nothing and
// tells of each.
type claimSignal struct {
	store.TaskStore
	empty   atomic.Int32
	claimed testsignal.Changes
}

func (s *claimSignal) ClaimTasks(ctx context.Context, p store.ClaimParams) ([]store.ClaimedTask, error) {
	defer s.claimed.Notify()
	cs, err := s.TaskStore.ClaimTasks(ctx, p)
	if err == nil && len(cs) == 0 {
		s.empty.Add(1)
	}
	return cs, err
}

// TestWakeStartsAndCancels: a pool that polls once an hour and renews its
// leases every twenty minutes starts a new batch's task as soon as it is
// committed, and a cancel of the batch ends the running generator call's
// context at once, with the batch's cancel as its cause; the task ends
// canceled.
func TestWakeStartsAndCancels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := &blocking{submitted: make(chan string, 1), ended: make(chan error, 1)}
	claims := &claimSignal{TaskStore: e.st}
	e.pool(worker.Config{Generators: gens{"sketch": g}, Store: claims,
		Options: leasequeue.Options{Wake: e.st.Wake(), PollMin: time.Hour, PollMax: time.Hour, LeaseTTL: time.Hour}})
	// Wait for the pool's first claim, which finds nothing: from then on,
	// only a wake-up makes it claim within the hour.
	claims.claimed.Until(t, "the pool's first claim", func() bool { return claims.empty.Load() > 0 })
	nb := e.batch(spec{frames: 1})
	if key := <-g.submitted; key != nb.Tasks[0].ID {
		t.Fatalf("submitted %s, want the new task %s", key, nb.Tasks[0].ID)
	}
	if _, err := e.st.CancelBatch(context.Background(), "alice", nb.ID); err != nil {
		t.Fatal(err)
	}
	if cause := <-g.ended; !errors.Is(cause, leasequeue.ErrCanceled) {
		t.Fatalf("the generator's context ended with %v, want the batch's cancel", cause)
	}
	b := e.waitBatch("alice", nb.ID, ended)
	if b.State != intent.StateCanceled {
		t.Fatalf("batch %+v, want canceled", b)
	}
}
