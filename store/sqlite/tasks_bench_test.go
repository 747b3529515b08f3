package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"studio/intent"
	"studio/store"
	"studio/store/sqlite"
	"studio/store/storetest"
)

// The cost of a claim + complete through the store, against the floor of
// the same two kinds of statement alone: one UPDATE ... RETURNING that
// leases k queued tasks, one transaction of k fenced UPDATEs that mark
// them succeeded (no fair-share ranking, no asset rows, no counts, no
// lease checks). Both run k = 1 and k = 16 tasks per round, over four
// batches of 600 tasks of four actors (refilled as they drain); ns/op is
// per round.

func benchStore(b *testing.B, sync string) *sqlite.Store {
	b.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(b.TempDir(), "studio.db"), Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// refill adds four batches of 600 tasks, of four actors, when fewer than
// k tasks are queued: the load of a drain (outside the timer).
// It answers the new batches' ids.
func refill(b *testing.B, s *sqlite.Store, queued *int, k int) []string {
	if *queued >= k {
		return nil
	}
	b.StopTimer()
	var ids []string
	for i := 0; i < 4; i++ {
		in := storetest.Intent(b, fmt.Sprint("actor-", i), fmt.Sprint("req-", *queued, "-", time.Now().UnixNano()), "fp", 600)
		if _, _, err := s.CreateIntent(context.Background(), in); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, in.Batch.ID)
	}
	*queued += 2400
	b.StartTimer()
	return ids
}

const benchSHA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func BenchmarkClaimComplete(b *testing.B) {
	for _, sync := range []string{sqlite.SyncNormal, sqlite.SyncFull} {
		for _, k := range []int{1, 16} {
			b.Run(fmt.Sprintf("sync=%s/k=%d/store", sync, k), func(b *testing.B) {
				s := benchStore(b, sync)
				ctx := context.Background()
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
					res, err := s.CompleteLeases(ctx, cs)
					if err != nil || res[0].Err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("sync=%s/k=%d/floor", sync, k), func(b *testing.B) {
				s := benchStore(b, sync)
				ctx := context.Background()
				db := s.DB()
				queued := 0
				// The floor's claim takes a batch's first queued tasks, as the
				// store's does, from batches it takes in turn.
				claim, err := db.Prepare(`UPDATE tasks SET state = 'running', fence = fence + 1
					WHERE id IN (SELECT id FROM tasks WHERE batch_id = ? AND state = 'queued' ORDER BY id LIMIT ?) RETURNING id, fence`)
				if err != nil {
					b.Fatal(err)
				}
				defer claim.Close()
				done, err := db.Prepare(`UPDATE tasks SET state = 'succeeded' WHERE id = ? AND fence = ?`)
				if err != nil {
					b.Fatal(err)
				}
				defer done.Close()
				type lease struct {
					id    string
					fence int64
				}
				ls := make([]lease, 0, k)
				var batches []string
				turn := 0
				for b.Loop() {
					if ids := refill(b, s, &queued, k); ids != nil {
						batches = ids
					}
					queued -= k
					rows, err := claim.QueryContext(ctx, batches[turn%4], k)
					turn++
					if err != nil {
						b.Fatal(err)
					}
					ls = ls[:0]
					for rows.Next() {
						var l lease
						rows.Scan(&l.id, &l.fence)
						ls = append(ls, l)
					}
					rows.Close()
					if len(ls) == 0 {
						b.Fatalf("claimed none")
					}
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					st := tx.StmtContext(ctx, done)
					for _, l := range ls {
						if _, err := st.ExecContext(ctx, l.id, l.fence); err != nil {
							b.Fatal(err)
						}
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
