package storetest

import (
	"context"
	"errors"
	"testing"

	"studio/locks"
)

// LockStoresMeet checks that two lock stores on one studio database (as
// two processes open it) meet in its tables: a lock one engine holds is
// seen by the other with its fence, and a semaphore's limit, once set by
// one, refuses another limit from the other (locks.ErrLimitConflict).
func LockStoresMeet(t *testing.T, a, b locks.Store) {
	t.Helper()
	ctx := t.Context()
	var engines [2]*locks.Engine
	for i, s := range []locks.Store{a, b} {
		engines[i] = locks.New(s)
		t.Cleanup(func() { engines[i].Close() })
	}
	err := engines[0].Hold(ctx, "k", func(ctx context.Context, l *locks.Lease) error {
		info, err := engines[1].Inspect(ctx, "k")
		if err != nil || len(info.Holders) != 1 || info.Holders[0].Fence != l.Fence() {
			t.Errorf("Inspect from the other engine: %+v, %v", info, err)
		}
		return engines[1].Semaphore(2).Hold(ctx, "gen", func(ctx context.Context, _ *locks.Lease) error {
			err := engines[0].Semaphore(3).Hold(ctx, "gen", func(context.Context, *locks.Lease) error { return nil })
			if !errors.Is(err, locks.ErrLimitConflict) {
				t.Errorf("a second limit on one key: %v", err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
