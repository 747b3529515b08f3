package lockstest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"studio/locks"
)

func op(client int, call, ret int64, in opInput, out opOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

// TestModelsRejectBadHistories proves the linearizability check can fail.
func TestModelsRejectBadHistories(t *testing.T) {
	acq := func(o string) opInput { return opInput{op: "acquire", owner: o} }
	rel := func(o string) opInput { return opInput{op: "release", owner: o} }
	cases := []struct {
		name    string
		model   porcupine.Model
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{"two holders one after the other", lockModel, []porcupine.Operation{
			op(0, 0, 1, acq("a"), opOutput{true, 1}),
			op(1, 2, 3, acq("b"), opOutput{true, 2}),
		}, porcupine.Illegal},
		{"fence not growing", lockModel, []porcupine.Operation{
			op(0, 0, 1, acq("a"), opOutput{true, 5}),
			op(0, 2, 3, rel("a"), opOutput{ok: true}),
			op(1, 4, 5, acq("b"), opOutput{true, 5}),
		}, porcupine.Illegal},
		{"free key refused", lockModel, []porcupine.Operation{
			op(0, 0, 1, acq("a"), opOutput{}),
		}, porcupine.Illegal},
		{"stale release answered true", lockModel, []porcupine.Operation{
			op(0, 0, 1, acq("a"), opOutput{true, 1}),
			op(1, 2, 3, rel("b"), opOutput{ok: true}),
		}, porcupine.Illegal},
		{"concurrent acquires, one wins", lockModel, []porcupine.Operation{
			op(0, 0, 10, acq("a"), opOutput{}),
			op(1, 0, 10, acq("b"), opOutput{true, 3}),
		}, porcupine.Ok},
		{"third slot of two", semModel(2), []porcupine.Operation{
			op(0, 0, 1, acq("a"), opOutput{true, 1}),
			op(1, 2, 3, acq("b"), opOutput{true, 2}),
			op(2, 4, 5, acq("c"), opOutput{true, 3}),
		}, porcupine.Illegal},
		{"slot freed then taken", semModel(1), []porcupine.Operation{
			op(0, 0, 1, acq("a"), opOutput{true, 1}),
			op(0, 2, 3, rel("a"), opOutput{ok: true}),
			op(1, 4, 5, acq("b"), opOutput{true, 2}),
		}, porcupine.Ok},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperationsTimeout(tc.model, tc.history, 10*time.Second); got != tc.want {
				t.Fatalf("check = %v, want %v", got, tc.want)
			}
		})
	}
}

// grantAll is a broken store: every acquisition succeeds.
type grantAll struct {
	locks.Store
	mu    sync.Mutex
	fence int64
}

func (g *grantAll) Acquire(context.Context, string, string, time.Duration) (int64, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fence++
	return g.fence, true, nil
}

// TestRecordedHistoryCatchesBrokenStore runs the recorder against a store
// without mutual exclusion: the check must refuse its history.
func TestRecordedHistoryCatchesBrokenStore(t *testing.T) {
	s := &grantAll{Store: locks.NewMemoryStore()}
	history := record(t, lockOps(s, "k"), 4, 20)
	if got := porcupine.CheckOperationsTimeout(lockModel, history, 30*time.Second); got != porcupine.Illegal {
		t.Fatalf("check of a store that grants everything = %v, want Illegal", got)
	}
}

func TestFakeClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewFakeClock(start)
	c.Advance(time.Minute)
	if got := c.Now(); !got.Equal(start.Add(time.Minute)) {
		t.Fatalf("Now() = %v", got)
	}
}
