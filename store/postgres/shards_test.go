package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/store"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

// A transaction holding a batch's row and every shard of its counts (as a
// slow commit would) does not hold up claims and completions of the batch's
// other tasks: they add their counts to a shard of their own.
func TestCountShardHeldDoesNotBlock(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.Schema(t)
	s := openLockDB(t, pgtest.URL(t), schema)
	ctx := context.Background()
	in := storetest.Intent(t, "alice", "held", "fp", 20)
	if _, _, err := s.CreateIntent(ctx, in); err != nil {
		t.Fatal(err)
	}
	first, err := s.ClaimTasks(ctx, store.ClaimParams{Owner: "w", Limit: 2, TTL: time.Minute})
	if err != nil || len(first) != 2 {
		t.Fatalf("claim: %d, %v", len(first), err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var held int
	if err := tx.QueryRow(ctx, `WITH b AS (SELECT id FROM batches WHERE id = $1 FOR NO KEY UPDATE),
		c AS (SELECT shard FROM batch_counts WHERE batch_id = $1 FOR NO KEY UPDATE)
		SELECT (SELECT count(*) FROM b) + (SELECT count(*) FROM c)`, in.Batch.ID).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 2 {
		t.Fatalf("held %d rows, want the batch and its one shard", held)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	more, err := s.ClaimTasks(short, store.ClaimParams{Owner: "w", Limit: 2, TTL: time.Minute})
	if err != nil || len(more) != 2 {
		t.Fatalf("claim beside a held shard: %d, %v", len(more), err)
	}
	res, err := s.CompleteLeases(short, []store.Completion{{Lease: first[0].Lease, Asset: intent.Asset{
		ID: mustTestID(t), SHA256: strings.Repeat("a", 64), ContentType: "image/png", Size: 1, Width: 1, Height: 1}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("complete beside a held shard: %v, %v", err, res)
	}
	got, err := s.GetBatch(short, "alice", in.Batch.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := (intent.Counts{Queued: 16, Running: 3, Succeeded: 1}); got.Counts != want {
		t.Fatalf("counts %+v, want %+v", got.Counts, want)
	}
	var shards int
	if err := s.pool.QueryRow(short, `SELECT count(*) FROM batch_counts WHERE batch_id = $1`, in.Batch.ID).Scan(&shards); err != nil {
		t.Fatal(err)
	}
	if shards < 2 {
		t.Fatalf("%d shards, want the held one and at least one more", shards)
	}
}

// Workers on several connections claim, complete, fail and release the
// tasks of one batch at once while a reader compares, in one snapshot at a
// time, the batch's counts (summed over its shards) with its tasks' states:
// they agree at every read.
func TestCountShardsAgreeWithTasks(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.Schema(t)
	url := pgtest.URL(t)
	s := openLockDB(t, url, schema)
	ctx := context.Background()
	const n = 120
	in := storetest.Intent(t, "alice", "agree", "fp", n)
	if _, _, err := s.CreateIntent(ctx, in); err != nil {
		t.Fatal(err)
	}
	id := in.Batch.ID
	ended := func(c intent.Counts) bool { return c.Ended() == n }
	var workers sync.WaitGroup
	for w := range 4 {
		ws := openLockDB(t, url, schema)
		workers.Go(func() {
			for round := 0; ; round++ {
				b, err := ws.GetBatch(ctx, "alice", id)
				if err != nil {
					t.Error(err)
					return
				}
				if ended(b.Counts) {
					return
				}
				cs, err := ws.ClaimTasks(ctx, store.ClaimParams{Owner: fmt.Sprint("w", w), Limit: 3, TTL: time.Minute, MaxAttempts: 3})
				if err != nil {
					t.Error(err)
					return
				}
				var done []store.Completion
				for i, c := range cs {
					switch (round + i) % 5 {
					case 0:
						if _, err := ws.FailLease(ctx, store.Failure{Lease: c.Lease, Error: "boom", MaxAttempts: 3}); err != nil {
							t.Error(err)
							return
						}
					case 1:
						if _, err := ws.ReleaseLeases(ctx, []store.Lease{c.Lease}); err != nil {
							t.Error(err)
							return
						}
					default:
						done = append(done, store.Completion{Lease: c.Lease, Asset: intent.Asset{
							ID: mustTestID(t), SHA256: strings.Repeat("b", 64), ContentType: "image/png", Size: 1, Width: 1, Height: 1}})
					}
				}
				if len(done) > 0 {
					if _, err := ws.CompleteLeases(ctx, done); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	stop := make(chan struct{})
	reads := 0
	var reader sync.WaitGroup
	reader.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
				b, err := getBatch(ctx, tx, "alice", id)
				if err != nil {
					return err
				}
				var tc intent.Counts
				rows, err := tx.Query(ctx, `SELECT state, count(*) FROM tasks WHERE batch_id = $1 GROUP BY state`, id)
				if err != nil {
					return err
				}
				var state intent.State
				var k int
				if _, err := pgx.ForEachRow(rows, []any{&state, &k}, func() error {
					*map[intent.State]*int{intent.StateQueued: &tc.Queued, intent.StateRunning: &tc.Running,
						intent.StateSucceeded: &tc.Succeeded, intent.StateFailed: &tc.Failed, intent.StateCanceled: &tc.Canceled}[state] = k
					return nil
				}); err != nil {
					return err
				}
				if b.Counts != tc {
					return fmt.Errorf("read %d: batch counts %+v, tasks %+v", reads, b.Counts, tc)
				}
				reads++
				return nil
			})
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	workers.Wait()
	close(stop)
	reader.Wait()
	if reads == 0 {
		t.Fatal("the reader never read")
	}
	b, err := s.GetBatch(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	if !ended(b.Counts) || b.Counts.Running != 0 || b.Counts.Queued != 0 {
		t.Fatalf("drained batch counts %+v", b.Counts)
	}
	t.Logf("%d consistent reads; final %+v", reads, b.Counts)
}

// mustTestID makes an id; safe from any goroutine.
func mustTestID(t *testing.T) string {
	t.Helper()
	id, err := intent.NewID()
	if err != nil {
		t.Error(err)
	}
	return id
}
