package intent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"studio/intent"
	"studio/intent/intenttest"
	"studio/store/sqlite"
)

// countingPlanner plans one task per frame x provider x candidate, counts
// its calls and how many run at once, and can hold every call until a
// number of them are inside at the same time.
type countingPlanner struct {
	calls, inside, maxInside atomic.Int64
	gate                     chan struct{} // closed when `want` calls are inside
	want                     int64
	limit                    int
}

func (p *countingPlanner) PlanGeneration(ctx context.Context, actor string, in *intent.GenerationInput) ([]intent.PlannedTask, error) {
	p.calls.Add(1)
	n := p.inside.Add(1)
	defer p.inside.Add(-1)
	for {
		m := p.maxInside.Load()
		if n <= m || p.maxInside.CompareAndSwap(m, n) {
			break
		}
	}
	if p.gate != nil {
		if n == p.want {
			close(p.gate)
		}
		select {
		case <-p.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("only %d plans ran at once, want %d", p.maxInside.Load(), p.want)
		}
	}
	var out []intent.PlannedTask
	for _, s := range in.Sets {
		for _, f := range s.Frames {
			for _, g := range in.Providers {
				for c := 1; c <= in.Candidates; c++ {
					out = append(out, intent.PlannedTask{Collection: s.Collection, Frame: f, Generator: g, Candidate: c})
				}
			}
		}
	}
	if p.limit > 0 && len(out) > p.limit {
		return nil, intent.Errorf(intent.EUnprocessable, "The plan has %d tasks; the limit is %d.", len(out), p.limit)
	}
	return out, nil
}

func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newService(t *testing.T, st intent.IntentStore, p intent.Planner) *intent.Service {
	return &intent.Service{Store: st, Planner: p, Locker: &intenttest.KeyedMutex{}}
}

func input(frames ...string) intent.GenerationInput {
	return intent.GenerationInput{
		Prompt:     "a knight in the rain",
		Sets:       []intent.FrameSet{{Collection: "walk", Frames: frames}},
		Providers:  []string{"sketch", "mosaic"},
		Candidates: 3,
		Subjects:   []string{},
		Params:     jsontext.Value(`{}`),
	}
}

func TestSameIDTwiceMakesOneBatch(t *testing.T) {
	t.Parallel()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	p := &countingPlanner{}
	svc := newService(t, s, p)
	ctx := context.Background()
	first, err := svc.CreateGeneration(ctx, "alice", "req-1", input("f01", "f02"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed || first.Batch.TaskCount != 12 {
		t.Fatalf("first = %+v", first)
	}
	second, err := svc.CreateGeneration(ctx, "alice", "req-1", input("f01", "f02"))
	if err != nil {
		t.Fatal(err)
	}
	if !second.Replayed || second.Batch.ID != first.Batch.ID {
		t.Fatalf("second = %+v, want a replay of %s", second, first.Batch.ID)
	}
	if got := p.calls.Load(); got != 1 {
		t.Fatalf("planned %d times, want 1", got)
	}
}

func TestChangedFieldIsRefused(t *testing.T) {
	t.Parallel()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	svc := newService(t, s, &countingPlanner{})
	ctx := context.Background()
	if _, err := svc.CreateGeneration(ctx, "alice", "req-1", input("f01", "f02")); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*intent.GenerationInput){
		"prompt":      func(in *intent.GenerationInput) { in.Prompt += "!" },
		"frame order": func(in *intent.GenerationInput) { in.Sets[0].Frames = []string{"f02", "f01"} },
		"candidates":  func(in *intent.GenerationInput) { in.Candidates = 2 },
		"params":      func(in *intent.GenerationInput) { in.Params = jsontext.Value(`{"width":64}`) },
	} {
		in := input("f01", "f02")
		change(&in)
		_, err := svc.CreateGeneration(ctx, "alice", "req-1", in)
		if intent.ErrorCode(err) != intent.EConflict || intent.ErrorMessage(err) != intent.ConflictMessage {
			t.Errorf("%s changed: err = %v, want the conflict", name, err)
		}
	}
	// Another actor's id of the same name is independent.
	if _, err := svc.CreateGeneration(ctx, "bob", "req-1", input("f09")); err != nil {
		t.Fatalf("bob: %v", err)
	}
}

func TestConcurrentDuplicatesPlanOnce(t *testing.T) {
	t.Parallel()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	p := &countingPlanner{}
	svc := newService(t, s, p)
	const n = 64
	var wg sync.WaitGroup
	ids := make([]string, n)
	created := atomic.Int64{}
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			res, err := svc.CreateGeneration(context.Background(), "alice", "storm", input("f01", "f02"))
			if err != nil {
				t.Errorf("try %d: %v", i, err)
				return
			}
			if !res.Replayed {
				created.Add(1)
			}
			ids[i] = res.Batch.ID
		}(i)
	}
	close(start)
	wg.Wait()
	if got := p.calls.Load(); got != 1 {
		t.Fatalf("%d concurrent duplicates planned %d times, want 1", n, got)
	}
	if created.Load() != 1 {
		t.Fatalf("%d answers said created, want 1", created.Load())
	}
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("answer %d names %s, answer 0 names %s", i, ids[i], ids[0])
		}
	}
}

func TestDifferentIDsPlanInParallel(t *testing.T) {
	t.Parallel()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	const n = 8
	// Every plan waits until all n are inside the planner at once: with a
	// lock that serialized planning, the first would time out alone.
	p := &countingPlanner{gate: make(chan struct{}), want: n}
	svc := newService(t, s, p)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := svc.CreateGeneration(context.Background(), "alice", fmt.Sprintf("req-%d", i), input("f01")); err != nil {
				t.Errorf("req-%d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if got := p.maxInside.Load(); got != n {
		t.Fatalf("at most %d plans ran at once, want %d", got, n)
	}
}

// blindStore hides every binding from the early read, as if another
// process committed between that read and the transaction.
type blindStore struct{ intent.IntentStore }

func (blindStore) LookupIntent(ctx context.Context, actor, requestID string) (intent.Binding, error) {
	return intent.Binding{}, intent.Errorf(intent.ENotFound, "Not found.")
}

func TestMismatchIsRefusedOnEveryPath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openStore(t, path)
	ctx := context.Background()
	first, err := newService(t, s, &countingPlanner{}).CreateGeneration(ctx, "alice", "req-1", input("f01"))
	if err != nil {
		t.Fatal(err)
	}
	other := input("f01")
	other.Prompt = "a robot"

	t.Run("warm", func(t *testing.T) {
		_, err := newService(t, s, &countingPlanner{}).CreateGeneration(ctx, "alice", "req-1", other)
		if intent.ErrorCode(err) != intent.EConflict {
			t.Fatalf("err = %v, want conflict", err)
		}
	})
	t.Run("after restart", func(t *testing.T) {
		s2 := openStore(t, path)
		p := &countingPlanner{}
		_, err := newService(t, s2, p).CreateGeneration(ctx, "alice", "req-1", other)
		if intent.ErrorCode(err) != intent.EConflict {
			t.Fatalf("err = %v, want conflict", err)
		}
		res, err := newService(t, s2, p).CreateGeneration(ctx, "alice", "req-1", input("f01"))
		if err != nil || !res.Replayed || res.Batch.ID != first.Batch.ID {
			t.Fatalf("replay after restart = %+v, %v", res, err)
		}
		if p.calls.Load() != 0 {
			t.Fatalf("planned %d times after restart, want 0", p.calls.Load())
		}
	})
	t.Run("found inside the transaction", func(t *testing.T) {
		p := &countingPlanner{}
		svc := newService(t, blindStore{s}, p)
		_, err := svc.CreateGeneration(ctx, "alice", "req-1", other)
		if intent.ErrorCode(err) != intent.EConflict || intent.ErrorMessage(err) != intent.ConflictMessage {
			t.Fatalf("err = %v, want the conflict", err)
		}
		res, err := svc.CreateGeneration(ctx, "alice", "req-1", input("f01"))
		if err != nil || !res.Replayed || res.Batch.ID != first.Batch.ID {
			t.Fatalf("same input = %+v, %v; want a replay of %s", res, err, first.Batch.ID)
		}
		if p.calls.Load() != 2 {
			t.Fatalf("the early read was blind, so both tries planned; calls = %d", p.calls.Load())
		}
	})
}

func TestRefusedPlanWritesNothing(t *testing.T) {
	t.Parallel()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	svc := newService(t, s, &countingPlanner{limit: 600})
	ctx := context.Background()
	big := input()
	for i := 0; i < 101; i++ { // 101 frames x 2 providers x 3 candidates = 606
		big.Sets[0].Frames = append(big.Sets[0].Frames, fmt.Sprintf("f%03d", i))
	}
	_, err := svc.CreateGeneration(ctx, "alice", "req-1", big)
	if intent.ErrorCode(err) != intent.EUnprocessable {
		t.Fatalf("err = %v, want unprocessable", err)
	}
	if _, err := s.LookupIntent(ctx, "alice", "req-1"); intent.ErrorCode(err) != intent.ENotFound {
		t.Fatalf("a refused plan bound the id: %v", err)
	}
	res, err := svc.CreateGeneration(ctx, "alice", "req-1", input("f01"))
	if err != nil || res.Replayed {
		t.Fatalf("valid body after a refused plan = %+v, %v; want created", res, err)
	}
}

func TestBadRequestIDIsInvalid(t *testing.T) {
	t.Parallel()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	p := &countingPlanner{}
	svc := newService(t, s, p)
	for _, id := range []string{"", "a\x00b", string(make([]rune, 101))} {
		_, err := svc.CreateGeneration(context.Background(), "alice", id, input("f01"))
		if intent.ErrorCode(err) != intent.EInvalid {
			t.Errorf("id %q: err = %v, want invalid", id, err)
		}
	}
	if p.calls.Load() != 0 {
		t.Fatal("an invalid id reached the planner")
	}
}

// TestReplayByFingerprint: ReplayGeneration answers, by the fingerprint a
// CreateGeneration answer carried, exactly the replay CreateGeneration
// gives, and is observed as one; an id not bound, bound to other input or
// to another actor is not its to answer (ok false, nothing observed,
// nothing planned). A publication's id: TestPublicationCreateReplayConflict.
func TestReplayByFingerprint(t *testing.T) {
	t.Parallel()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	p := &countingPlanner{}
	svc := newService(t, s, p)
	var outcomes []intent.Outcome
	svc.Observe = func(op string, o intent.Outcome) { outcomes = append(outcomes, o) }
	ctx := context.Background()
	first, err := svc.CreateGeneration(ctx, "alice", "req-1", input("f01"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := intent.Fingerprint("alice", intent.OpGeneration, input("f01"))
	if err != nil || first.Fingerprint != want {
		t.Fatalf("fingerprint %q (%v), want %q", first.Fingerprint, err, want)
	}
	other, err := svc.CreateGeneration(ctx, "alice", "req-2", input("f02"))
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := svc.ReplayGeneration(ctx, "alice", "req-1", first.Fingerprint)
	again, _ := svc.CreateGeneration(ctx, "alice", "req-1", input("f01"))
	if err != nil || !ok || got != again || !got.Replayed {
		t.Fatalf("replay by fingerprint: %+v, %v, %v; the whole way: %+v", got, ok, err, again)
	}
	for _, c := range []struct{ name, actor, id, fp string }{
		{"not bound", "alice", "req-3", first.Fingerprint},
		{"bound to other input", "alice", "req-2", first.Fingerprint},
		{"another actor", "bob", "req-1", first.Fingerprint},
		{"no fingerprint", "alice", "req-1", ""},
		{"a bad id", "alice", "", first.Fingerprint},
	} {
		if res, ok, err := svc.ReplayGeneration(ctx, c.actor, c.id, c.fp); ok || err != nil || res.Batch.ID != "" {
			t.Errorf("%s: %+v, %v, %v; want not ok", c.name, res, ok, err)
		}
	}
	if _, ok, _ := svc.ReplayGeneration(ctx, "alice", "req-2", other.Fingerprint); !ok {
		t.Errorf("req-2 by its own fingerprint: not ok")
	}
	wantOutcomes := []intent.Outcome{intent.OutcomeCreated, intent.OutcomeCreated, intent.OutcomeReplayed, intent.OutcomeReplayed, intent.OutcomeReplayed}
	if !slices.Equal(outcomes, wantOutcomes) {
		t.Errorf("observed %v, want %v", outcomes, wantOutcomes)
	}
	if n := p.calls.Load(); n != 2 {
		t.Errorf("planned %d times, want 2", n)
	}
}
