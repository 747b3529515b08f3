package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"studio/intent"
	"studio/migrations"
	"studio/store"
	"studio/store/sqlite"
)

// TestMigration0007OnAnOldDatabase builds a database the way the releases
// before migration 0007 left it (migrations 0001..0006 applied, the task
// index tasks_by_batch present), fills it with batches in every state,
// tasks in every state, assets, an upload and a publication with items,
// then opens it with the store, which applies 0007. Every table holds the
// same rows after, the index is gone, and the store reads every record as
// the old queries did: the batches, each batch's tasks in plan order (all
// states, each state, paged), the bindings, assets and the publication.
func TestMigration0007OnAnOldDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ms, err := migrations.For("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", strings.Fields(q)[0:3], err)
		}
	}
	exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`)
	for _, m := range ms {
		if m.Version >= 7 {
			continue
		}
		exec(m.SQL)
		exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 1)`, m.Version, m.Name)
	}
	if !hasIndex(t, db, "tasks_by_batch") {
		t.Fatal("the old schema has no tasks_by_batch: the test does not start from the old database")
	}

	// Five batches of the actor "alice", one per batch state, with tasks
	// in every task state spread over them; one of "bob".
	id := func() string {
		t.Helper()
		v, err := intent.NewID()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	type batchRow struct {
		actor   string
		state   intent.State
		tasks   []string // task states, in plan order
		started bool
	}
	batches := []batchRow{
		{"alice", intent.StateQueued, []string{"queued", "queued", "queued"}, false},
		{"alice", intent.StateRunning, []string{"succeeded", "running", "queued", "failed", "running", "canceled", "queued"}, true},
		{"alice", intent.StateSucceeded, []string{"succeeded", "succeeded", "succeeded", "succeeded"}, true},
		{"alice", intent.StateFailed, []string{"succeeded", "failed", "failed"}, true},
		{"alice", intent.StateCanceled, []string{"canceled", "succeeded", "canceled", "failed"}, true},
		{"bob", intent.StateQueued, []string{"queued"}, false},
	}
	var batchIDs []string
	var assetIDs []string
	var assetBatch string
	for bi, b := range batches {
		bid := id()
		batchIDs = append(batchIDs, bid)
		req := fmt.Sprintf("req-%d", bi)
		counts := map[string]int{}
		for _, st := range b.tasks {
			counts[st]++
		}
		exec(`INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at) VALUES (?, ?, 'generation', ?, ?, ?)`,
			b.actor, req, fmt.Sprintf("%064d", bi), bid, 1000+bi)
		exec(`INSERT INTO batches (id, actor, request_id, prompt, spec, task_count, queued, running, succeeded, failed, canceled, started,
			cancel_requested, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			bid, b.actor, req, "prompt "+req, []byte(`{"prompt":"p"}`), len(b.tasks), counts["queued"], counts["running"],
			counts["succeeded"], counts["failed"], counts["canceled"], b.started, b.state == intent.StateCanceled, 1000+bi, 2000+bi)
		for ti, st := range b.tasks {
			tid := id()
			var owner, expires, asset, errText any
			attempts, fence := 0, 0
			switch st {
			case "running":
				owner, expires, attempts, fence = "w1", 99999999999999, 1, 1
			case "succeeded":
				attempts, fence = 1, 1
				aid := id()
				exec(`INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
					VALUES (?, ?, NULL, ?, 'image/png', 67, 1, 1, 5)`, aid, b.actor, fmt.Sprintf("%064x", len(assetIDs)))
				asset = aid
				if b.state == intent.StateSucceeded {
					assetIDs = append(assetIDs, aid)
					assetBatch = bid
				}
			case "failed":
				attempts, fence, errText = 5, 5, "boom"
			}
			exec(`INSERT INTO tasks (id, batch_id, actor, collection, frame, generator, candidate, state, attempts, fence, lease_owner,
				lease_expires_at, step, provider_ref, asset_id, error, created_at, updated_at)
				VALUES (?, ?, ?, 'walk', ?, 'sketch', 1, ?, ?, ?, ?, ?, 'fetch', 'ref', ?, ?, 1, ?)`,
				tid, bid, b.actor, fmt.Sprintf("f%02d", ti), st, attempts, fence, owner, expires, asset, errText, 3000+ti)
			if asset != nil {
				exec(`UPDATE assets SET task_id = ? WHERE id = ?`, tid, asset)
			}
		}
	}
	// An upload (an asset with no task) and a publication of the
	// succeeded batch's assets, one item delivered.
	upload := id()
	exec(`INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		VALUES (?, 'alice', NULL, ?, 'image/webp', 10, 2, 2, 6)`, upload, strings.Repeat("ab", 32))
	exec(`INSERT INTO upload_keys (actor, client_key, asset_id, sha256, created_at) VALUES ('alice', 'up-1', ?, ?, 6)`, upload, strings.Repeat("ab", 32))
	pub := id()
	exec(`INSERT INTO intents (actor, request_id, operation, fingerprint, resource_id, created_at) VALUES ('alice', 'pub-1', 'publication', ?, ?, 7)`,
		strings.Repeat("c", 64), pub)
	exec(`INSERT INTO publications (id, actor, request_id, batch_id, channel, item_count, queued, succeeded, started, created_at, updated_at)
		VALUES (?, 'alice', 'pub-1', ?, 'gallery', ?, ?, 1, 1, 7, 8)`, pub, assetBatch, len(assetIDs), len(assetIDs)-1)
	for i, a := range assetIDs {
		st := "queued"
		if i == 0 {
			st = "succeeded"
		}
		exec(`INSERT INTO publication_items (id, publication_id, asset_id, state, created_at, updated_at) VALUES (?, ?, ?, ?, 7, 8)`, id(), pub, a, st)
	}
	exec(`INSERT INTO tokens (hash, actor, created_at) VALUES (?, 'alice', 1)`, strings.Repeat("d", 64))

	// What the old queries answered.
	tables := []string{"tokens", "intents", "batches", "tasks", "assets", "upload_keys", "publications", "publication_items"}
	before := map[string][][]any{}
	for _, tb := range tables {
		before[tb] = dump(t, db, tb)
	}
	oldTasks := map[string][]string{} // batch id + state -> task ids, by the old query
	for _, bid := range batchIDs {
		for _, st := range []string{"", "queued", "running", "succeeded", "failed", "canceled"} {
			q, args := `SELECT id FROM tasks WHERE batch_id = ?`, []any{bid}
			if st != "" {
				q += ` AND state = ?`
				args = append(args, st)
			}
			oldTasks[bid+"/"+st] = column(t, db, q+` ORDER BY id`, args...)
		}
	}
	db.Close()

	s, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatalf("open (migrate): %v", err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if hasIndex(t, s.ReadDB(), "tasks_by_batch") {
		t.Error("tasks_by_batch is still there after 0007")
	}
	if !hasIndex(t, s.ReadDB(), "tasks_by_batch_state") {
		t.Error("tasks_by_batch_state is gone")
	}
	for _, tb := range tables {
		after := dump(t, s.ReadDB(), tb)
		if tb == "tasks" {
			// 0008 (generation_calls, history) appends two columns, at
			// their defaults on every old row.
			for i, row := range after {
				if n := len(row); n < 2 || row[n-2] != int64(0) || row[n-1] != "" {
					t.Errorf("task row %d after 0008: %v", i, row)
				} else {
					after[i] = row[:n-2]
				}
			}
		}
		if tb == "tokens" {
			// 0010 (label, expires_at, revoked_at, last_used_at) appends
			// four columns: no label, no expiry, live, never used.
			for i, row := range after {
				if n := len(row); n != 7 || row[3] != "" || row[4] != nil || row[5] != nil || row[6] != nil {
					t.Errorf("token row %d after 0010: %v", i, row)
				} else {
					after[i] = row[:3]
				}
			}
		}
		if !reflect.DeepEqual(after, before[tb]) {
			t.Errorf("table %s changed in the migration:\nbefore %v\nafter  %v", tb, before[tb], after)
		}
	}
	for bi, bid := range batchIDs {
		b := batches[bi]
		got, err := s.GetBatch(ctx, b.actor, bid)
		if err != nil {
			t.Fatalf("GetBatch %d: %v", bi, err)
		}
		if got.State != b.state || got.TaskCount != len(b.tasks) {
			t.Errorf("batch %d: state %s, %d tasks; want %s, %d", bi, got.State, got.TaskCount, b.state, len(b.tasks))
		}
		bd, err := s.LookupIntent(ctx, b.actor, fmt.Sprintf("req-%d", bi))
		if err != nil || bd.ResourceID != bid || bd.Fingerprint != fmt.Sprintf("%064d", bi) {
			t.Errorf("binding %d: %+v, %v", bi, bd, err)
		}
		for _, st := range []intent.State{"", "queued", "running", "succeeded", "failed", "canceled"} {
			want := oldTasks[bid+"/"+string(st)]
			for _, limit := range []int{2, 100} {
				var got []string
				p := store.ListParams{Actor: b.actor, Limit: limit, State: st}
				for {
					page, err := s.ListTasks(ctx, bid, p)
					if err != nil {
						t.Fatalf("ListTasks: %v", err)
					}
					for _, tk := range page {
						got = append(got, tk.ID)
						if st != "" && tk.State != st {
							t.Errorf("ListTasks state=%s answered a %s task", st, tk.State)
						}
					}
					if len(page) < limit {
						break
					}
					p.After = page[len(page)-1].ID
				}
				if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Errorf("batch %d, state %q, limit %d: tasks %v, want %v", bi, st, limit, got, want)
				}
			}
		}
	}
	if _, err := s.ListTasks(ctx, batchIDs[0], store.ListParams{Actor: "bob", Limit: 10}); intent.ErrorCode(err) != intent.ENotFound {
		t.Errorf("another actor's batch: %v, want not found", err)
	}
	page, err := s.ListBatches(ctx, store.ListParams{Actor: "alice", Limit: 100})
	if err != nil || len(page) != 5 {
		t.Errorf("ListBatches: %d, %v", len(page), err)
	}
	p, err := s.GetPublication(ctx, "alice", pub)
	if err != nil || p.BatchID != assetBatch {
		t.Errorf("GetPublication: %+v, %v", p, err)
	}
	if a, err := s.GetAsset(ctx, "alice", upload); err != nil || a.TaskID != nil || a.ContentType != "image/webp" {
		t.Errorf("GetAsset (upload): %+v, %v", a, err)
	}
	if actor, err := s.ActorForToken(ctx, strings.Repeat("d", 64)); err != nil || actor != "alice" {
		t.Errorf("ActorForToken: %q, %v", actor, err)
	}
	// The migrated database takes new work: a claim finds the queued
	// tasks of the migrated batches.
	cs, err := s.ClaimTasks(ctx, store.ClaimParams{Owner: "w2", Limit: 100, TTL: 60_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(oldTasks[batchIDs[0]+"/queued"]) + len(oldTasks[batchIDs[1]+"/queued"]) + len(oldTasks[batchIDs[5]+"/queued"]); len(cs) != want {
		t.Errorf("claimed %d tasks after the migration, want %d", len(cs), want)
	}
}

func hasIndex(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func column(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// dump reads every row of a table in rowid-free primary key order.
func dump(t *testing.T, db *sql.DB, table string) [][]any {
	t.Helper()
	rows, err := db.Query(`SELECT * FROM ` + table + ` ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, vals)
	}
	if len(out) == 0 {
		t.Fatalf("table %s is empty: the test fills every table", table)
	}
	return out
}
