package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/migrations"
	"studio/store"
	"studio/store/postgres"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Eight processes' worth of stores open one new schema at the same moment:
// every one succeeds, and each migration is applied (and recorded) once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	base := pgtest.URL(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema := "studio_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Error(err)
		}
	})

	const n = 8
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			stores[i], errs[i] = postgres.Open(testCtx(t), postgres.Config{URL: base, Schema: schema, MaxConns: 2})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	ms, err := migrations.For("postgres")
	if err != nil {
		t.Fatal(err)
	}
	var rows, distinct, top int
	if err := stores[0].Pool().QueryRow(testCtx(t),
		`SELECT count(*), count(DISTINCT version), COALESCE(max(version), 0) FROM schema_migrations`).Scan(&rows, &distinct, &top); err != nil {
		t.Fatal(err)
	}
	if rows != len(ms) || distinct != len(ms) || top != ms[len(ms)-1].Version {
		t.Fatalf("schema_migrations: %d rows, %d versions, top %d; want %d, %d, %d",
			rows, distinct, top, len(ms), len(ms), ms[len(ms)-1].Version)
	}
	for i, s := range stores {
		if err := s.Ping(testCtx(t)); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
	}
}

// The binding goes in first and a second try of the same key waits for the
// first's transaction. Here the first is held open by hand: when it rolls
// back, the waiting CreateIntent becomes the owner and creates the tree; when
// it commits other input, the waiting one answers a conflict; when it commits
// the same input, a replay.
func TestCreateIntentWaitsForAnInFlightBinding(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		fingerprint string // of the transaction held open
		commit      bool
		wantCreated bool
		wantCode    string
	}{
		{"rolled back: the waiter creates", "fp", false, true, ""},
		{"committed other input: conflict", "fp-other", true, false, intent.EConflict},
		{"committed the same input: replay", "fp", true, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, _ := pgtest.Schema(t)
			s := open(t, u)
			ctx := testCtx(t)

			held := storetest.Intent(t, "alice", "req", tc.fingerprint, 3)
			tx, err := s.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var heldPID int32
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&heldPID); err != nil {
				t.Fatal(err)
			}
			b := held.Binding
			if _, err := tx.Exec(ctx, `INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at)
				VALUES ($1, $2, $3, $4, $5, $6)`, b.Actor, b.RequestID, b.Operation, b.Fingerprint, b.ResourceID, b.CreatedAt); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO batches (id, actor, request_id, prompt, spec, task_count, queued, created_at, updated_at)
				VALUES ($1, $2, $3, 'p', '\x7b7d', 0, 0, now(), now())`, b.ResourceID, b.Actor, b.RequestID); err != nil {
				t.Fatal(err)
			}

			type result struct {
				b       intent.Binding
				created bool
				err     error
			}
			done := make(chan result, 1)
			try := storetest.Intent(t, "alice", "req", "fp", 5)
			go func() {
				b, c, err := s.CreateIntent(ctx, try)
				done <- result{b, c, err}
			}()
			// The try must be waiting on the held row's lock, not answered.
			waitForBlocked(t, s, heldPID)
			select {
			case r := <-done:
				t.Fatalf("CreateIntent answered while the binding was in flight: %+v", r)
			default:
			}
			if tc.commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if got := intent.ErrorCode(r.err); got != tc.wantCode {
				t.Fatalf("error %v (code %q), want code %q", r.err, got, tc.wantCode)
			}
			if r.created != tc.wantCreated {
				t.Fatalf("created = %v, want %v", r.created, tc.wantCreated)
			}
			batches, err := s.ListBatches(ctx, storeList("alice"))
			if err != nil {
				t.Fatal(err)
			}
			if len(batches) != 1 {
				t.Fatalf("%d batches, want 1", len(batches))
			}
			want := held.Batch.ID
			if tc.wantCreated {
				want = try.Batch.ID
				if batches[0].TaskCount != 5 {
					t.Fatalf("created batch has %d tasks, want 5", batches[0].TaskCount)
				}
			}
			if batches[0].ID != want {
				t.Fatalf("the batch is %s, want %s", batches[0].ID, want)
			}
			if tc.wantCode == "" && r.b.ResourceID != want {
				t.Fatalf("the answer names %s, want %s", r.b.ResourceID, want)
			}
		})
	}
}

// waitForBlocked waits until some backend waits on a lock that the backend
// pid holds.
func waitForBlocked(t *testing.T, s *postgres.Store, pid int32) {
	t.Helper()
	ctx := testCtx(t)
	for {
		var waiting bool
		err := s.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("nothing ever waited for the held transaction")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func storeList(actor string) store.ListParams { return store.ListParams{Actor: actor, Limit: 100} }

// A cancel racing tasks that go back to the queue (a transient failure, a
// release) and claims: whichever commits first, no task is left queued in a
// batch asked to cancel, and the counts equal the tasks. Each round claims
// every task, then fails half and releases half while the batch is
// canceled.
func TestCancelRacingRequeues(t *testing.T) {
	t.Parallel()
	u, _ := pgtest.Schema(t)
	s := open(t, u)
	twin := openSchema(t, s.Schema())
	ctx := testCtx(t)
	for round := range 8 {
		in := storetest.Intent(t, "alice", fmt.Sprintf("req-%d", round), "fp", 40)
		if _, _, err := s.CreateIntent(ctx, in); err != nil {
			t.Fatal(err)
		}
		var leases []store.ClaimedTask
		for len(leases) < 40 {
			cs, err := s.ClaimTasks(ctx, store.ClaimParams{Owner: "w", Limit: 40, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if len(cs) == 0 {
				t.Fatalf("claimed %d of 40", len(leases))
			}
			leases = append(leases, cs...)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range leases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := []*postgres.Store{s, twin}[i%2]
				<-start
				var err error
				if i%2 == 0 {
					_, err = st.FailLease(ctx, store.Failure{Lease: c.Lease, Error: "flaky", MaxAttempts: 5})
				} else {
					_, err = st.ReleaseLeases(ctx, []store.Lease{c.Lease})
				}
				if err != nil {
					t.Errorf("task %d: %v", i, err)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := twin.CancelBatch(ctx, "alice", in.Batch.ID); err != nil {
				t.Errorf("cancel: %v", err)
			}
		}()
		// In odd rounds a claimer joins the race and runs whatever it gets
		// straight to success. Even rounds have none: a claim would cancel a
		// task wrongly left queued, and hide it.
		wg.Add(round % 2)
		go func() {
			if round%2 == 0 {
				return
			}
			defer wg.Done()
			<-start
			for range 20 {
				cs, err := s.ClaimTasks(ctx, store.ClaimParams{Owner: "late", Limit: 4, TTL: time.Minute})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				for _, c := range cs {
					if _, err := s.CompleteLeases(ctx, []store.Completion{{Lease: c.Lease, Asset: intent.Asset{
						ID: mustID(t), SHA256: "ab", ContentType: "image/png", Size: 1, Width: 1, Height: 1}}}); err != nil {
						t.Errorf("complete: %v", err)
					}
				}
			}
		}()
		close(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		b, err := s.GetBatch(ctx, "alice", in.Batch.ID)
		if err != nil {
			t.Fatal(err)
		}
		var c intent.Counts
		tasks, err := s.ListTasks(ctx, in.Batch.ID, store.ListParams{Actor: "alice", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range tasks {
			switch tk.State {
			case intent.StateQueued:
				t.Fatalf("round %d: task %s queued in a canceled batch", round, tk.ID)
			case intent.StateRunning:
				t.Fatalf("round %d: task %s still running", round, tk.ID)
			case intent.StateSucceeded:
				c.Succeeded++
			case intent.StateCanceled:
				c.Canceled++
			default:
				t.Fatalf("round %d: task %s is %s", round, tk.ID, tk.State)
			}
		}
		if b.Counts != c || b.State != intent.StateCanceled {
			t.Fatalf("round %d: batch %+v, tasks say %+v", round, b, c)
		}
	}
}

func mustID(t *testing.T) string {
	t.Helper()
	id, err := intent.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Migration 0103 drops tasks_by_batch_state: a new schema never has it,
// and a database made before 0103 (the index there, 0103 not recorded)
// loses it on the next Open, which leaves the other indexes.
func TestIndexesAfter0103(t *testing.T) {
	t.Parallel()
	u, schema := pgtest.Schema(t)
	ctx := testCtx(t)
	indexes := func(s *postgres.Store) []string {
		t.Helper()
		var names []string
		if err := s.Pool().QueryRow(ctx, `SELECT COALESCE(array_agg(indexname::text ORDER BY indexname), '{}')
			FROM pg_indexes WHERE schemaname = $1 AND tablename IN ('tasks', 'assets')`, schema).Scan(&names); err != nil {
			t.Fatal(err)
		}
		return names
	}
	want := fmt.Sprint([]string{"assets_by_actor", "assets_by_sha256", "assets_pkey", "assets_task_id_key",
		"tasks_by_batch", "tasks_leased", "tasks_pkey", "tasks_queued"})
	s := open(t, u)
	if got := fmt.Sprint(indexes(s)); got != want {
		t.Fatalf("a new schema's task and asset indexes: %s, want %s", got, want)
	}
	// The database as 0102 left it.
	if _, err := s.Pool().Exec(ctx, `CREATE INDEX tasks_by_batch_state ON tasks (batch_id, state, id);
		DELETE FROM schema_migrations WHERE version = 103`); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(indexes(s)); got == want {
		t.Fatalf("the old schema's indexes are the new ones (%s): the test does not start from the old schema", got)
	}
	if got := fmt.Sprint(indexes(openSchema(t, schema))); got != want {
		t.Fatalf("indexes after 0103 on an old schema: %s, want %s", got, want)
	}
}
