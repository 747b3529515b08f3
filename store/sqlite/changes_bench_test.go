package sqlite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
	"studio/store/sqlite"
)

// BenchmarkChangeStamp is the cost of migration 0006's trigger on the
// drain path: the store's claim + complete of k tasks per round (as
// BenchmarkClaimComplete), on a store with the trigger ("stamped") and on
// one where it was dropped ("unstamped"). Run with -count N: the two
// alternate, and their ratio is the trigger's cost.
func BenchmarkChangeStamp(b *testing.B) {
	for _, k := range []int{1, 16} {
		for _, stamped := range []bool{true, false} {
			name := map[bool]string{true: "stamped", false: "unstamped"}[stamped]
			b.Run(fmt.Sprintf("k=%d/%s", k, name), func(b *testing.B) {
				s := benchStore(b, sqlite.SyncNormal)
				ctx := context.Background()
				if !stamped {
					if _, err := s.DB().ExecContext(ctx, `DROP TRIGGER tasks_change_seq`); err != nil {
						b.Fatal(err)
					}
				}
				cs := make([]store.Completion, 0, k)
				queued := 0
				for b.Loop() {
					refill(b, s, &queued, k)
					queued -= k
					claimed, err := s.ClaimTasks(ctx, store.ClaimParams{Owner: "w", Limit: k, TTL: time.Minute})
					if err != nil || len(claimed) != k {
						b.Fatalf("claimed %d, %v", len(claimed), err)
					}
					cs = cs[:0]
					for _, c := range claimed {
						id, _ := intent.NewID()
						cs = append(cs, store.Completion{Lease: c.Lease, Asset: intent.Asset{ID: id, SHA256: benchSHA, ContentType: "image/png", Size: 67, Width: 1, Height: 1}})
					}
					res, err := s.CompleteTasks(ctx, cs)
					if err != nil || res[0].Err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
