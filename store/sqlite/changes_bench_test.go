package sqlite_test

import (
	"context"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
	"studio/store/sqlite"
)

// BenchmarkChangeStamp is the cost of migration 0006's trigger on the
// drain path: each round is the store's claim + complete of 16 tasks (as
// BenchmarkClaimComplete) on a store with the trigger and on one where it
// was dropped, alternating (which goes first swaps every round), so that
// a noisy machine slows both alike. It reports each side's time per round
// and their ratio (stamped/unstamped).
func BenchmarkChangeStamp(b *testing.B) {
	const k = 16
	ctx := context.Background()
	stamped, unstamped := benchStore(b, sqlite.SyncNormal), benchStore(b, sqlite.SyncNormal)
	if _, err := unstamped.DB().ExecContext(ctx, `DROP TRIGGER tasks_change_seq`); err != nil {
		b.Fatal(err)
	}
	queued := map[*sqlite.Store]*int{stamped: new(int), unstamped: new(int)}
	var took [2]time.Duration
	cs := make([]store.Completion, 0, k)
	round := func(s *sqlite.Store) time.Duration {
		refill(b, s, queued[s], k)
		*queued[s] -= k
		start := time.Now()
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
		return time.Since(start)
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			took[0] += round(stamped)
			took[1] += round(unstamped)
		} else {
			took[1] += round(unstamped)
			took[0] += round(stamped)
		}
		i++
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(i), "stamped-ns/round")
	b.ReportMetric(float64(took[1].Nanoseconds())/float64(i), "unstamped-ns/round")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "ratio")
}
