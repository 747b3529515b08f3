package store

import (
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
