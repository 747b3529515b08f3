package worker_test

import (
	"context"
	"strings"
	"testing"

	"studio/generator"
	"studio/intent"
	"studio/worker"
)

// wrongSize is the sketch generator drawing every image at 16x16, whatever
// the task asks, with a size_mismatch of warn or refuse.
type wrongSize struct {
	generator.Generator
	refuse bool
}

func (w wrongSize) Fetch(ctx context.Context, ref string) (generator.Image, error) {
	return generator.NewSketch().Fetch(ctx, strings.Replace(ref, ":32x32:", ":16x16:", 1))
}

func (w wrongSize) RefusesOtherSizes() bool { return w.refuse }

// TestImageOfAnotherSize: an image of another size than the params ask is
// kept with a line in the task's history (size_mismatch warn), or thrown
// away and the task failed at once (refuse).
func TestImageOfAnotherSize(t *testing.T) {
	t.Parallel()
	for _, refuse := range []bool{false, true} {
		e := newEnv(t)
		nb := e.batch(spec{frames: 1, params: `{"width":32,"height":32}`})
		e.pool(worker.Config{Generators: gens{"sketch": wrongSize{generator.NewSketch(), refuse}}})
		e.waitBatch("alice", nb.ID, ended)
		tk := e.tasks("alice", nb.ID)[0]
		if !refuse {
			if tk.State != intent.StateSucceeded || len(tk.History) != 1 || !strings.Contains(tk.History[0], "made an image of 16x16, not the 32x32 asked; kept") {
				t.Fatalf("warn: %+v", tk)
			}
			continue
		}
		if tk.State != intent.StateFailed || tk.Attempts != 1 || tk.Error == nil || !strings.Contains(*tk.Error, "size_mismatch: refuse") {
			t.Fatalf("refuse: %+v", tk)
		}
	}
}
