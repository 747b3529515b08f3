package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/locks"
	"studio/store"
	"studio/store/postgres"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

// Benchmarks compare each store method with its floor: the bare statements
// that do the same work, measured in the same run on the same server. Read
// the ratios store/floor, not the absolute times.

func benchStore(b *testing.B) *postgres.Store {
	b.Helper()
	u, _ := pgtest.Schema(b)
	return open(b, u)
}

func intents(b *testing.B, n, tasks int) []intent.NewIntent {
	b.Helper()
	out := make([]intent.NewIntent, n)
	for i := range out {
		out[i] = storetest.Intent(b, "alice", fmt.Sprintf("req-%d", i), "fp", tasks)
	}
	return out
}

// BenchmarkCommit600 commits a 600-task intent. Floors: one transaction
// inserting the same rows with no binding check (tasks by COPY, as the store
// does), and the same with the tasks in one INSERT from unnest arrays, the
// other bulk way.
func BenchmarkCommit600(b *testing.B) {
	ctx := context.Background()
	b.Run("store", func(b *testing.B) {
		s := benchStore(b)
		ins := intents(b, b.N, 600)
		b.ResetTimer()
		for i := range b.N {
			if _, created, err := s.CreateIntent(ctx, ins[i]); err != nil || !created {
				b.Fatal(created, err)
			}
		}
	})
	b.Run("floor-copy", func(b *testing.B) {
		s := benchStore(b)
		ins := intents(b, b.N, 600)
		b.ResetTimer()
		for i := range b.N {
			if err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
				if err := bareHead(ctx, tx, ins[i]); err != nil {
					return err
				}
				nb := ins[i].Batch
				_, err := tx.CopyFrom(ctx, pgx.Identifier{"tasks"},
					[]string{"id", "batch_id", "actor", "collection", "frame", "generator", "candidate", "created_at", "updated_at"},
					pgx.CopyFromSlice(len(nb.Tasks), func(j int) ([]any, error) {
						t := &nb.Tasks[j]
						return []any{t.ID, nb.ID, "alice", t.Collection, t.Frame, t.Generator, int32(t.Candidate), nb.CreatedAt, nb.CreatedAt}, nil
					}))
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-unnest", func(b *testing.B) {
		s := benchStore(b)
		ins := intents(b, b.N, 600)
		b.ResetTimer()
		for i := range b.N {
			if err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
				if err := bareHead(ctx, tx, ins[i]); err != nil {
					return err
				}
				nb := ins[i].Batch
				n := len(nb.Tasks)
				ids, cols, frames, gens := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
				cands := make([]int32, n)
				for j, t := range nb.Tasks {
					ids[j], cols[j], frames[j], gens[j], cands[j] = t.ID, t.Collection, t.Frame, t.Generator, int32(t.Candidate)
				}
				_, err := tx.Exec(ctx, `INSERT INTO tasks (id, batch_id, actor, collection, frame, generator, candidate, created_at, updated_at)
					SELECT u.id, $1, $2, u.c, u.f, u.g, u.n, $3, $3
					FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::int[]) AS u(id, c, f, g, n)`,
					nb.ID, "alice", nb.CreatedAt, ids, cols, frames, gens, cands)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// bareHead inserts the binding and the batch row with plain INSERTs.
func bareHead(ctx context.Context, tx pgx.Tx, in intent.NewIntent) error {
	bd, nb := in.Binding, in.Batch
	if _, err := tx.Exec(ctx, `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6)`, bd.Actor, bd.RequestID, bd.Operation, bd.Fingerprint, bd.ResourceID, bd.CreatedAt); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO batches (id, actor, request_id, prompt, spec, task_count, queued, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $7)`, nb.ID, bd.Actor, bd.RequestID, nb.Prompt, nb.Spec, len(nb.Tasks), nb.CreatedAt)
	return err
}

// BenchmarkReplay reads what a replay answers: the binding, then its batch
// (LookupIntent + GetBatch, as the service does). Floor: the two
// primary-key reads as bare statements.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	in := storetest.Intent(b, "alice", "req", "fp", 600)
	if _, _, err := s.CreateIntent(ctx, in); err != nil {
		b.Fatal(err)
	}
	b.Run("store", func(b *testing.B) {
		for range b.N {
			bd, err := s.LookupIntent(ctx, "alice", "req")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.GetBatch(ctx, "alice", bd.ResourceID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor", func(b *testing.B) {
		// The same columns the answer needs, scanned into bare variables.
		var (
			op, fp, id, rid, actor, prompt string
			created, updated               time.Time
			n, q, r, su, f, c              int
			started                        bool
		)
		for range b.N {
			if err := s.Pool().QueryRow(ctx, `SELECT operation, fingerprint, resource_id, created_at FROM intents WHERE actor = $1 AND request_id = $2`,
				"alice", "req").Scan(&op, &fp, &id, &created); err != nil {
				b.Fatal(err)
			}
			if err := s.Pool().QueryRow(ctx, `SELECT id, actor, request_id, prompt, task_count, queued, running, succeeded, failed, canceled, started, created_at, updated_at
				FROM batches WHERE id = $1 AND actor = $2`, id, "alice").
				Scan(&id, &actor, &rid, &prompt, &n, &q, &r, &su, &f, &c, &started, &created, &updated); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A replay that reaches the commit (two tries raced past the look-up):
	// the binding insert does nothing and the binding is read back.
	b.Run("store-create-replay", func(b *testing.B) {
		for range b.N {
			if _, created, err := s.CreateIntent(ctx, in); err != nil || created {
				b.Fatal(created, err)
			}
		}
	})
}

// fill creates enough 600-task batches for n claims.
func fill(b *testing.B, s *postgres.Store, n int) {
	b.Helper()
	for i := 0; i*600 < n; i++ {
		if _, _, err := s.CreateIntent(context.Background(), storetest.Intent(b, "alice", fmt.Sprintf("fill-%d", i), "fp", 600)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimComplete claims one task and completes it with an asset:
// two transactions, as a worker runs them. Floor: the bare statements of
// the same two transactions (a SKIP LOCKED claim of the first queued task
// with no fair share, no clock read, no expired-lease pass; the fenced
// completion with the asset insert; the count updates).
func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	b.Run("store", func(b *testing.B) {
		s := benchStore(b)
		fill(b, s, b.N)
		b.ResetTimer()
		for range b.N {
			cs, err := s.ClaimTasks(ctx, store.ClaimParams{Owner: "w", Limit: 1, TTL: time.Minute})
			if err != nil || len(cs) != 1 {
				b.Fatal(len(cs), err)
			}
			res, err := s.CompleteTasks(ctx, []store.Completion{{Lease: cs[0].Lease, Asset: intent.Asset{
				ID: cs[0].TaskID, SHA256: "ab", ContentType: "image/png", Size: 1, Width: 1, Height: 1}}})
			if err != nil || res[0].Err != nil {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("floor", func(b *testing.B) {
		s := benchStore(b)
		fill(b, s, b.N)
		b.ResetTimer()
		for range b.N {
			var id, batch string
			var fence int64
			if err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, `UPDATE tasks SET state = 'running', fence = fence + 1, attempts = attempts + 1,
						lease_owner = 'w', lease_expires_at = clock_timestamp() + interval '1 minute', updated_at = now()
					WHERE id = (SELECT id FROM tasks WHERE state = 'queued' ORDER BY batch_id, id LIMIT 1 FOR UPDATE SKIP LOCKED)
					RETURNING id, batch_id, fence`).Scan(&id, &batch, &fence); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE batches SET queued = queued - 1, running = running + 1, started = true, updated_at = now() WHERE id = $1`, batch)
				return err
			}); err != nil {
				b.Fatal(err)
			}
			if err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
				tag, err := tx.Exec(ctx, `UPDATE tasks SET state = 'succeeded', asset_id = $1, lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
					WHERE id = $1 AND fence = $2 AND state = 'running' AND lease_expires_at > clock_timestamp()`, id, fence)
				if err != nil || tag.RowsAffected() != 1 {
					return fmt.Errorf("complete: %v", err)
				}
				if _, err := tx.Exec(ctx, `INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
					VALUES ($1, 'alice', $1, 'ab', 'image/png', 1, 1, 1, now())`, id); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, `UPDATE batches SET running = running - 1, succeeded = succeeded + 1, updated_at = now() WHERE id = $1`, batch)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLock takes and releases one key, uncontended. Floors: an INSERT
// and a DELETE of a row in a bare table (what any table-based lease costs),
// and PostgreSQL's session advisory lock and unlock (no lease, no fence,
// gone with the connection).
func BenchmarkLock(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	if _, err := s.Pool().Exec(ctx, `CREATE TABLE bench_floor (key bytea PRIMARY KEY, owner text NOT NULL,
		fence bigint NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	key := []byte("k")
	b.Run("floor=INSERT+DELETE", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Pool().Exec(ctx, `INSERT INTO bench_floor VALUES ($1, 'o', 1, clock_timestamp()) ON CONFLICT (key) DO NOTHING`, key); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Pool().Exec(ctx, `DELETE FROM bench_floor WHERE key = $1`, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor=advisory", func(b *testing.B) {
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Release()
		for b.Loop() {
			if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(42)`); err != nil {
				b.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(42)`); err != nil {
				b.Fatal(err)
			}
		}
	})
	ls := postgres.NewLockStore(s)
	b.Run("store=Acquire+Release", func(b *testing.B) {
		for b.Loop() {
			if _, ok, err := ls.Acquire(ctx, "k", "o", time.Minute); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if ok, err := ls.Release(ctx, "k", "o"); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	e := locks.New(ls)
	defer e.Close()
	b.Run("engine=Hold", func(b *testing.B) {
		for b.Loop() {
			if err := e.Hold(ctx, "k", func(context.Context, *locks.Lease) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}
