package store

import (
	"context"
	"errors"
	"slices"
	"testing"

	"studio/intent"
)

func TestStateAfterFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		canceling, permanent bool
		used, maxAttempts    int
		want                 intent.State
	}{
		{"transient, attempts left", false, false, 2, 5, intent.StateQueued},
		{"transient, last attempt used", false, false, 5, 5, intent.StateFailed},
		{"permanent on the first attempt", false, true, 1, 5, intent.StateFailed},
		{"cancel wins over permanent", true, true, 1, 5, intent.StateCanceled},
		{"cancel wins over no attempts left", true, false, 5, 5, intent.StateCanceled},
		{"no limit", false, false, 1000, 0, intent.StateQueued},
	} {
		if got := StateAfterFailure(tc.canceling, tc.permanent, tc.used, tc.maxAttempts); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestCountDeltasInIDOrder(t *testing.T) {
	t.Parallel()
	d := CountDeltas{}
	d.Of("b").Running++
	d.Of("a").Queued--
	d.Of("b").Succeeded++
	if got := d.IDs(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("IDs = %v, want [a b]", got)
	}
	if b := d.Of("b"); b.Running != 1 || b.Succeeded != 1 {
		t.Fatalf("delta of b = %+v", *b)
	}
}

func TestCountDeltaMove(t *testing.T) {
	t.Parallel()
	var d CountDelta
	d.Move(intent.StateQueued, intent.StateRunning)
	if d != (CountDelta{Queued: -1, Running: 1, Started: true}) {
		t.Fatalf("claim: %+v", d)
	}
	d = CountDelta{}
	d.Move(intent.StateRunning, intent.StateSucceeded)
	d.Move(intent.StateRunning, intent.StateFailed)
	d.Move(intent.StateRunning, intent.StateQueued)
	d.Move(intent.StateQueued, intent.StateCanceled)
	if d != (CountDelta{Queued: 0, Running: -3, Succeeded: 1, Failed: 1, Canceled: 1}) {
		t.Fatalf("moves: %+v", d)
	}
}

// stepWriter saves the steps of live tasks; of the others, those in
// canceling are canceled.
type stepWriter struct {
	live, canceling map[string]bool
	broken          string // a task whose write fails the transaction
	deltas          CountDeltas
	order           []string
}

func (w *stepWriter) SaveStep(_ context.Context, st StepSave) (bool, error) {
	w.order = append(w.order, st.ID)
	if st.ID == w.broken {
		return false, errors.New("disk full")
	}
	return w.live[st.ID], nil
}

func (w *stepWriter) CancelIfRequested(_ context.Context, l Lease) error {
	return CancelRequested(w.deltas, "batch", w.canceling[l.ID])
}

func TestSaveStepsIn(t *testing.T) {
	t.Parallel()
	steps := []StepSave{{Lease: Lease{ID: "a"}}, {Lease: Lease{ID: "b"}}, {Lease: Lease{ID: "c"}}}
	w := &stepWriter{live: map[string]bool{"a": true}, canceling: map[string]bool{"b": true}, deltas: CountDeltas{}}
	out, err := SaveStepsIn(context.Background(), w, steps, []int{2, 1, 0})
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != nil || !errors.Is(out[1], ErrTaskCanceled) || !errors.Is(out[2], ErrLeaseLost) {
		t.Fatalf("answers %v", out)
	}
	if !slices.Equal(w.order, []string{"c", "b", "a"}) {
		t.Fatalf("written in order %v, want c b a", w.order)
	}
	if d := *w.deltas["batch"]; d != (CountDelta{Running: -1, Canceled: 1}) {
		t.Fatalf("deltas %+v", d)
	}
	w = &stepWriter{broken: "b", deltas: CountDeltas{}}
	if _, err := SaveStepsIn(context.Background(), w, steps, InOrder(3)); err == nil {
		t.Fatal("a failed write did not fail the transaction")
	}
}
