package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/locks"
	"studio/locks/pglock"
	"studio/store"
	"studio/store/postgres"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

// Benchmarks compare each store operation with its floor: the bare
// statements that do the same work. The two alternate within one run (store
// then floor, floor then store, ...) on the same server, so load from
// elsewhere falls on both alike; each reports store-ns/op, floor-ns/op and
// their ratio store/floor. Read the ratio, not the absolute times.

func benchStore(b *testing.B) *postgres.Store {
	b.Helper()
	u, _ := pgtest.Schema(b)
	return open(b, u)
}

// alternate runs op and floor b.N times each, alternating which goes
// first, and reports their mean times and ratio.
func alternate(b *testing.B, op, floor func(i int) error) {
	b.Helper()
	var tOp, tFloor time.Duration
	timed := func(fn func(int) error, i int, sum *time.Duration) {
		start := time.Now()
		if err := fn(i); err != nil {
			b.Fatal(err)
		}
		*sum += time.Since(start)
	}
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			timed(op, i, &tOp)
			timed(floor, i, &tFloor)
		} else {
			timed(floor, i, &tFloor)
			timed(op, i, &tOp)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(tOp.Nanoseconds())/n, "store-ns/op")
	b.ReportMetric(float64(tFloor.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(tOp)/float64(tFloor), "store/floor")
}

func intents(b *testing.B, prefix string, n, tasks int) []intent.NewIntent {
	b.Helper()
	out := make([]intent.NewIntent, n)
	for i := range out {
		out[i] = storetest.Intent(b, "alice", fmt.Sprintf("%s-%d", prefix, i), "fp", tasks)
	}
	return out
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

// floorCopy is one transaction with the rows of an intent: binding and
// batch by INSERT, tasks by COPY, no check.
func floorCopy(ctx context.Context, s *postgres.Store, in intent.NewIntent) error {
	return pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		if err := bareHead(ctx, tx, in); err != nil {
			return err
		}
		nb := in.Batch
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"tasks"},
			[]string{"id", "batch_id", "actor", "collection", "frame", "generator", "candidate", "created_at", "updated_at"},
			pgx.CopyFromSlice(len(nb.Tasks), func(j int) ([]any, error) {
				t := &nb.Tasks[j]
				return []any{t.ID, nb.ID, "alice", t.Collection, t.Frame, t.Generator, int32(t.Candidate), nb.CreatedAt, nb.CreatedAt}, nil
			}))
		return err
	})
}

// floorUnnest is floorCopy with the tasks in one INSERT from arrays.
func floorUnnest(ctx context.Context, s *postgres.Store, in intent.NewIntent) error {
	return pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		if err := bareHead(ctx, tx, in); err != nil {
			return err
		}
		nb := in.Batch
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
	})
}

// BenchmarkCommit600 commits a 600-task intent (CreateIntent: binding
// first, batch, tasks by COPY). Floor: one transaction inserting the same
// rows the same bulk way, with no binding check. The second case compares
// the other bulk way, one INSERT from unnest arrays, with COPY.
func BenchmarkCommit600(b *testing.B) {
	ctx := context.Background()
	b.Run("store-vs-copy", func(b *testing.B) {
		s := benchStore(b)
		ins, floor := intents(b, "s", b.N, 600), intents(b, "f", b.N, 600)
		alternate(b, func(i int) error {
			_, created, err := s.CreateIntent(ctx, ins[i])
			if err == nil && !created {
				err = fmt.Errorf("not created")
			}
			return err
		}, func(i int) error { return floorCopy(ctx, s, floor[i]) })
	})
	b.Run("unnest-vs-copy", func(b *testing.B) {
		s := benchStore(b)
		ins, floor := intents(b, "u", b.N, 600), intents(b, "f", b.N, 600)
		alternate(b, func(i int) error { return floorUnnest(ctx, s, ins[i]) },
			func(i int) error { return floorCopy(ctx, s, floor[i]) })
	})
}

// BenchmarkReplay reads what a replay answers: the binding, then its batch
// (LookupIntent + GetBatch, as the service does). Floor: the two
// primary-key reads as bare statements, the same columns. The second case
// is a replay that reaches the commit (two tries raced past the look-up):
// the binding insert does nothing and the binding is read back.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	in := storetest.Intent(b, "alice", "req", "fp", 600)
	if _, _, err := s.CreateIntent(ctx, in); err != nil {
		b.Fatal(err)
	}
	floor := func(int) error {
		var (
			op, fp, id, rid, actor, prompt string
			created, updated               time.Time
			n, q, r, su, f, c              int
			started                        bool
		)
		if err := s.Pool().QueryRow(ctx, `SELECT operation, fingerprint, resource_id, created_at FROM intents WHERE actor = $1 AND request_id = $2`,
			"alice", "req").Scan(&op, &fp, &id, &created); err != nil {
			return err
		}
		return s.Pool().QueryRow(ctx, `SELECT id, actor, request_id, prompt, task_count, queued, running, succeeded, failed, canceled, started, created_at, updated_at
			FROM batches WHERE id = $1 AND actor = $2`, id, "alice").
			Scan(&id, &actor, &rid, &prompt, &n, &q, &r, &su, &f, &c, &started, &created, &updated)
	}
	b.Run("lookup", func(b *testing.B) {
		alternate(b, func(int) error {
			bd, err := s.LookupIntent(ctx, "alice", "req")
			if err != nil {
				return err
			}
			_, err = s.GetBatch(ctx, "alice", bd.ResourceID)
			return err
		}, floor)
	})
	b.Run("through-commit", func(b *testing.B) {
		alternate(b, func(int) error {
			_, created, err := s.CreateIntent(ctx, in)
			if err == nil && created {
				err = fmt.Errorf("created on replay")
			}
			return err
		}, floor)
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
// the same two transactions (a SKIP LOCKED claim of the first queued task,
// with no fair share and no pass over expired leases; the fenced completion
// with the asset insert; the count updates).
func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	fill(b, s, 2*b.N)
	alternate(b, func(int) error {
		cs, err := s.ClaimTasks(ctx, store.ClaimParams{Owner: "w", Limit: 1, TTL: time.Minute})
		if err != nil || len(cs) != 1 {
			return fmt.Errorf("claim: %d, %v", len(cs), err)
		}
		res, err := s.CompleteLeases(ctx, []store.Completion{{Lease: cs[0].Lease, Asset: intent.Asset{
			ID: cs[0].ID, SHA256: "ab", ContentType: "image/png", Size: 1, Width: 1, Height: 1}}})
		if err == nil && res[0].Err != nil {
			err = res[0].Err
		}
		return err
	}, func(int) error {
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
			return err
		}
		return pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
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
		})
	})
}

// BenchmarkLock takes and releases one key, uncontended: the lock store's
// Acquire + Release, and the engine's Hold (which also arms renewal). Floor:
// an INSERT and a DELETE of a row in a bare table, what any table-based
// lease costs. The last case shows PostgreSQL's session advisory lock
// against the same floor: cheaper, but no lease, no fence, and gone with
// its connection.
func BenchmarkLock(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	if _, err := s.Pool().Exec(ctx, `CREATE TABLE bench_floor (key bytea PRIMARY KEY, owner text NOT NULL,
		fence bigint NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	key := []byte("k")
	floor := func(int) error {
		if _, err := s.Pool().Exec(ctx, `INSERT INTO bench_floor VALUES ($1, 'o', 1, clock_timestamp()) ON CONFLICT (key) DO NOTHING`, key); err != nil {
			return err
		}
		_, err := s.Pool().Exec(ctx, `DELETE FROM bench_floor WHERE key = $1`, key)
		return err
	}
	ls, err := pglock.New(ctx, s.Pool())
	if err != nil {
		b.Fatal(err)
	}
	defer ls.Close()
	b.Run("store=Acquire+Release", func(b *testing.B) {
		alternate(b, func(int) error {
			if _, ok, err := ls.Acquire(ctx, "k", "o", time.Minute); err != nil || !ok {
				return fmt.Errorf("acquire: %v, %v", ok, err)
			}
			_, err := ls.Release(ctx, "k", "o")
			return err
		}, floor)
	})
	e := locks.New(ls)
	defer e.Close()
	b.Run("engine=Hold", func(b *testing.B) {
		alternate(b, func(int) error {
			return e.Hold(ctx, "k", func(context.Context, *locks.Lease) error { return nil })
		}, floor)
	})
	b.Run("advisory", func(b *testing.B) {
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Release()
		alternate(b, func(int) error {
			if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(42)`); err != nil {
				return err
			}
			_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(42)`)
			return err
		}, floor)
	})
}

// BenchmarkPublicationCommit commits a publication of 600 assets
// (CreateIntent: binding first, the publication selected from the actor's
// batch, the items in one INSERT from arrays joined to the assets and their
// tasks, a check that every asset was found). Floor: the binding, the
// publication and the items as bare INSERTs, the items from the same
// arrays with no join.
func BenchmarkPublicationCommit(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	batch, assets := storetest.BatchWithAssets(b, s, "alice", "gen", 600)
	pub := func(prefix string) []intent.NewIntent {
		out := make([]intent.NewIntent, b.N)
		for i := range out {
			out[i] = storetest.PublicationIntent(b, "alice", fmt.Sprintf("%s-%d", prefix, i), "fp", batch, assets, intent.ChannelGallery)
		}
		return out
	}
	ins, floor := pub("s"), pub("f")
	alternate(b, func(i int) error {
		_, created, err := s.CreateIntent(ctx, ins[i])
		if err == nil && !created {
			err = fmt.Errorf("not created")
		}
		return err
	}, func(i int) error {
		bd, np := floor[i].Binding, floor[i].Publication
		return pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
				VALUES ($1, $2, $3, $4, $5, $6)`, bd.Actor, bd.RequestID, bd.Operation, bd.Fingerprint, bd.ResourceID, bd.CreatedAt); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO publications (id, actor, request_id, batch_id, channel, item_count, queued, created_at, updated_at)
				VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $7)`, np.ID, bd.Actor, bd.RequestID, np.BatchID, np.Channel, len(np.Items), np.CreatedAt); err != nil {
				return err
			}
			ids, as := make([]string, len(np.Items)), make([]string, len(np.Items))
			for j, it := range np.Items {
				ids[j], as[j] = it.ID, it.AssetID
			}
			_, err := tx.Exec(ctx, `INSERT INTO publication_items (id, publication_id, asset_id, created_at, updated_at)
				SELECT u.id, $1, u.asset, $2, $2 FROM unnest($3::text[], $4::text[]) AS u(id, asset)`, np.ID, np.CreatedAt, ids, as)
			return err
		})
	})
}

// BenchmarkUploadCommit runs CreateUpload with a client key (the asset,
// then the key with ON CONFLICT DO NOTHING) beside the floor of the two
// bare inserts.
func BenchmarkUploadCommit(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	ups := func(prefix string) []intent.NewUpload {
		out := make([]intent.NewUpload, b.N)
		for i := range out {
			out[i] = intent.NewUpload{ClientKey: fmt.Sprintf("%s-%d", prefix, i), Asset: intent.Asset{ID: mustIDB(b), Actor: "alice",
				SHA256: "ab", ContentType: "image/png", Size: 100, Width: 8, Height: 8, CreatedAt: time.Now()}}
		}
		return out
	}
	ins, floor := ups("s"), ups("f")
	alternate(b, func(i int) error {
		_, created, err := s.CreateUpload(ctx, ins[i])
		if err == nil && !created {
			err = fmt.Errorf("not created")
		}
		return err
	}, func(i int) error {
		a := floor[i].Asset
		return pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
				VALUES ($1, $2, NULL, $3, $4, $5, $6, $7, $8)`, a.ID, a.Actor, a.SHA256, a.ContentType, a.Size, a.Width, a.Height, a.CreatedAt); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO upload_keys (actor, client_key, asset_id, sha256, created_at)
				VALUES ($1, $2, $3, $4, $5)`, a.Actor, floor[i].ClientKey, a.ID, a.SHA256, a.CreatedAt)
			return err
		})
	})
}

func mustIDB(b *testing.B) string {
	b.Helper()
	id, err := intent.NewID()
	if err != nil {
		b.Fatal(err)
	}
	return id
}
