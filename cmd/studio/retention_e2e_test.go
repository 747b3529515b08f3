package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"studio/httpapi"
	"studio/intent"
	"studio/store"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

// studioCLI runs `studio args...` in this process and answers its stdout;
// the test fails unless it exits 0.
func studioCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("studio %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

// TestTokenRevokedOnEveryInstance: a token made by `studio token create`
// works on two serve processes sharing the database; `studio token list`
// names it (never its secret); after `studio token revoke` both answer 401
// within the cache's bound (store.DefaultCacheMaxAge), on SQLite and on
// PostgreSQL.
func TestTokenRevokedOnEveryInstance(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		data := t.TempDir()
		revokeAcrossInstances(t, []string{"STUDIO_DATA=" + data}, []string{"--data", data})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url, _ := pgtest.Schema(t)
		revokeAcrossInstances(t, []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + t.TempDir()},
			[]string{"--database", url, "--data", t.TempDir()})
	})
}

func revokeAcrossInstances(t *testing.T, env, db []string) {
	env = append(env, "STUDIO_WORKERS=0")
	a := startProcess(t, env, "serve", "--addr", "127.0.0.1:0")
	b := startProcess(t, env, "serve", "--addr", "127.0.0.1:0")
	token := strings.TrimSpace(studioCLI(t, append([]string{"token", "create", "--actor", "bob", "--name", "ci runner", "--expires", "30d"}, db...)...))
	list := studioCLI(t, append([]string{"token", "list", "--actor", "bob"}, db...)...)
	id := store.TokenID(httpapi.HashToken(token))
	if !strings.Contains(list, id) || !strings.Contains(list, "ci runner") || strings.Contains(list, token) {
		t.Fatalf("token list:\n%s\nwant id %s and its label, never the secret", list, id)
	}
	status := func(p *proc) int {
		resp, err := newClient(t, p.Addr, token).do(context.Background(), "GET", "/v1/batches", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	for _, p := range []*proc{a, b} {
		if c := status(p); c != http.StatusOK {
			t.Fatalf("the new token on %s: %d", p.Addr, c)
		}
	}
	if !regexp.MustCompile(`(?m)^` + id + `\s+bob\s+ci runner .* \d{4}-\d\d-\d\dT\d\d:00:00Z\s+live$`).MatchString(
		studioCLI(t, append([]string{"token", "list"}, db...)...)) {
		t.Fatalf("token list after use: want its last use to the hour")
	}
	revoked := time.Now()
	out := studioCLI(t, append([]string{"token", "revoke", id}, db...)...)
	if !strings.Contains(out, "revoked "+id) {
		t.Fatalf("token revoke: %q", out)
	}
	for _, p := range []*proc{a, b} {
		waitFor(t, 30*time.Second, "401 on "+p.Addr, func() bool { return status(p) == http.StatusUnauthorized })
	}
	t.Logf("401 on both instances %v after the revoke (bound %v)", time.Since(revoked).Round(time.Millisecond), store.DefaultCacheMaxAge)
	if !strings.Contains(studioCLI(t, append([]string{"token", "list"}, db...)...), "revoked ") {
		t.Fatalf("token list does not show the revocation")
	}
}

// TestDeletePruneVacuum: `studio delete` refuses a running batch and
// deletes an ended one; `studio prune --dry-run` counts and deletes
// nothing, `studio prune` deletes what is old enough and its files;
// `studio vacuum` converts the file.
func TestDeletePruneVacuum(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Workers = 2
	m, _ := startMain(t, cfg)
	token := readToken(t, cfg.Data)
	c := newClient(t, m.Addr(), token)
	ctx := context.Background()
	var kept, gone batchAnswer
	for _, x := range []struct {
		rid string
		out *batchAnswer
	}{{"keep", &kept}, {"go", &gone}} {
		if resp, err := c.do(ctx, "POST", "/v1/generations", generation(x.rid, "f01"), x.out); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %v %v", x.rid, resp, err)
		}
	}
	cli := []string{"--server", "http://" + m.Addr(), "--token", token}
	waitFor(t, 60*time.Second, "both batches to end", func() bool {
		for _, id := range []string{kept.ID, gone.ID} {
			var b batchAnswer
			if _, err := c.do(ctx, "GET", "/v1/batches/"+id, nil, &b); err != nil || b.State != "succeeded" {
				return false
			}
		}
		return true
	})
	if out := studioCLI(t, append([]string{"delete", gone.ID}, cli...)...); !strings.Contains(out, "deleted "+gone.ID) {
		t.Fatalf("studio delete: %q", out)
	}
	var errb bytes.Buffer
	if code := run(ctx, append([]string{"delete", gone.ID}, cli...), &bytes.Buffer{}, &errb); code != exitUsage {
		t.Fatalf("second delete: exit %d, want %d (404): %s", code, exitUsage, errb.String())
	}

	db := []string{"--data", cfg.Data}
	dry := studioCLI(t, append([]string{"prune", "--older-than", "1ns", "--dry-run"}, db...)...)
	if !strings.Contains(dry, fmt.Sprintf("would delete 1 batches, %d tasks", kept.TaskCount)) {
		t.Fatalf("prune --dry-run: %q", dry)
	}
	if resp, _ := c.do(ctx, "GET", "/v1/batches/"+kept.ID, nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("a dry run deleted: %d", resp.StatusCode)
	}
	files := countFiles(t, filepath.Join(cfg.Data, "assets"))
	out := studioCLI(t, append([]string{"prune", "--older-than", "1ns", "--sweep-age", "1ns"}, db...)...)
	if !strings.Contains(out, fmt.Sprintf("deleted 1 batches, %d tasks, %[1]d assets", kept.TaskCount)) {
		t.Fatalf("prune: %q", out)
	}
	if after := countFiles(t, filepath.Join(cfg.Data, "assets")); after >= files || after != 0 {
		t.Fatalf("asset files: %d before the prune, %d after; want none left", files, after)
	}
	waitFor(t, 10*time.Second, "the pruned batch to be gone", func() bool {
		resp, err := c.do(ctx, "GET", "/v1/batches/"+kept.ID, nil, nil)
		return err == nil && resp.StatusCode == http.StatusNotFound
	})
	if out := studioCLI(t, append([]string{"vacuum"}, db...)...); !strings.Contains(out, "auto_vacuum=INCREMENTAL") {
		t.Fatalf("vacuum: %q", out)
	}
}

// countFiles counts the regular files under dir.
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestServeRetain: serve --retain prunes, as it starts, the ended batches
// older than the window, keeps the others, and counts what it removed in
// the metrics.
func TestServeRetain(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Workers = 1
	m, _ := startMain(t, cfg)
	c := newClient(t, m.Addr(), readToken(t, cfg.Data))
	ctx := context.Background()
	b := createSucceeded(t, c, "old")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.Retain = age(time.Nanosecond)
	m2, _ := startMain(t, cfg)
	c2 := newClient(t, m2.Addr(), readToken(t, cfg.Data))
	waitFor(t, 30*time.Second, "the old batch to be pruned", func() bool {
		resp, err := c2.do(ctx, "GET", "/v1/batches/"+b.ID, nil, nil)
		return err == nil && resp.StatusCode == http.StatusNotFound
	})
	resp, err := http.Get("http://" + m2.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var text bytes.Buffer
	text.ReadFrom(resp.Body)
	want := fmt.Sprintf(`studio_removed_total{what="tasks"} %d`, b.TaskCount)
	if !strings.Contains(text.String(), want) || !strings.Contains(text.String(), `studio_kept{what="batches"} 0`) {
		t.Fatalf("metrics after the prune: want %q and no batch kept:\n%s", want, grepLines(text.String(), "studio_removed")+"\n"+grepLines(text.String(), "studio_kept"))
	}
}

// TestBackupUnderLoad: `studio backup` copies a live studio while a
// creator posts batches and workers drain them; serve on the copy has
// every batch committed before the backup started, replays of their
// request ids answer 200 with the same batch, and its queued tasks drain.
func TestBackupUnderLoad(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Workers = 2
	m, _ := startMain(t, cfg)
	token := readToken(t, cfg.Data)
	c := newClient(t, m.Addr(), token)
	ctx := context.Background()

	var mu sync.Mutex
	made := map[string]string{} // request id -> batch id, answered before the backup began
	began := make(chan struct{})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rid := fmt.Sprintf("load-%d", i)
			var b batchAnswer
			resp, err := c.do(ctx, "POST", "/v1/generations", generation(rid, "f01", "f02"), &b)
			if err != nil || resp.StatusCode != http.StatusCreated {
				t.Errorf("create %s: %v %v", rid, resp, err)
				return
			}
			select {
			case <-began: // answered after the backup began: may or may not be in it
			default:
				mu.Lock()
				made[rid] = b.ID
				mu.Unlock()
			}
			if i == 5 {
				began <- struct{}{} // five batches at least before the backup
			}
		}
	}()
	<-began
	close(began)
	dir := filepath.Join(t.TempDir(), "backup")
	out := studioCLI(t, "backup", dir, "--data", cfg.Data)
	close(stop)
	<-done
	if !strings.Contains(out, "integrity ok") {
		t.Fatalf("backup: %q", out)
	}
	m.Close()

	rcfg := testConfig(t)
	rcfg.Data = dir
	rcfg.Workers = 2
	r, _ := startMain(t, rcfg)
	rc := newClient(t, r.Addr(), token)
	mu.Lock()
	defer mu.Unlock()
	for rid, id := range made {
		var b batchAnswer
		resp, err := rc.do(ctx, "POST", "/v1/generations", generation(rid, "f01", "f02"), &b)
		if err != nil || resp.StatusCode != http.StatusOK || b.ID != id {
			t.Fatalf("replay of %s on the restored copy: %v %v %s, want 200 with %s", rid, resp, err, b.ID, id)
		}
	}
	for _, id := range made {
		waitFor(t, 60*time.Second, "batch "+id+" to drain on the copy", func() bool {
			var b batchAnswer
			_, err := rc.do(ctx, "GET", "/v1/batches/"+id, nil, &b)
			return err == nil && b.State == "succeeded"
		})
	}
	t.Logf("%d batches made before the backup, all restored and drained", len(made))
}

// TestPostgresDumpRestore: the pg_dump and pg_restore commands of
// docs/postgres.md round-trip a studio schema, the blobs table included:
// after the schema is dropped and restored, serve on it answers the
// batches, replays their request ids with 200 and serves their images.
func TestPostgresDumpRestore(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	if _, err := exec.LookPath("pg_dump"); err != nil {
		t.Skip("pg_dump is not installed")
	}
	env := []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + t.TempDir(), "STUDIO_WORKERS=2"}
	p := startProcess(t, env, "serve", "--addr", "127.0.0.1:0")
	token := pgToken(t, url, "alice")
	c := newClient(t, p.Addr, token)
	ctx := context.Background()
	b := createSucceeded(t, c, "dump-1")
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)

	base := os.Getenv(pgtest.EnvURL)
	dump := filepath.Join(t.TempDir(), "studio.dump")
	for _, args := range [][]string{
		{"pg_dump", "--format=custom", "--schema=" + schema, "--file=" + dump, base},
		{"psql", base, "-c", `DROP SCHEMA "` + schema + `" CASCADE`},
		{"pg_restore", "--dbname=" + base, dump},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	p2 := startProcess(t, env, "serve", "--addr", "127.0.0.1:0")
	c2 := newClient(t, p2.Addr, token)
	var again batchAnswer
	if resp, err := c2.do(ctx, "POST", "/v1/generations", generation("dump-1", "f01"), &again); err != nil || resp.StatusCode != http.StatusOK || again.ID != b.ID {
		t.Fatalf("replay after the restore: %v %v %s, want 200 with %s", resp, err, again.ID, b.ID)
	}
	var tasks struct {
		Items []struct {
			AssetID *string `json:"asset_id"`
		} `json:"items"`
	}
	if _, err := c2.do(ctx, "GET", "/v1/batches/"+b.ID+"/tasks", nil, &tasks); err != nil || len(tasks.Items) == 0 || tasks.Items[0].AssetID == nil {
		t.Fatalf("tasks after the restore: %+v, %v", tasks, err)
	}
	resp, err := c2.do(ctx, "GET", "/v1/assets/"+*tasks.Items[0].AssetID+"/content", nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("an image after the restore: %v %v", resp, err)
	}
}

// TestSoakPruneKeepsSize: 20 cycles of create -> drain -> prune (with
// distinct image bytes each cycle) keep studio.db and assets/ within 20%
// of their size after the first cycle: deleted rows' pages go back to the
// filesystem, unnamed files are removed.
func TestSoakPruneKeepsSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(t)
	e, err := openEngine(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.store.Close()
	blobs, err := e.blobs()
	if err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		var n int64
		for _, dir := range []string{cfg.sqlitePath(), filepath.Join(cfg.Data, "assets")} {
			filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if fi, err := d.Info(); err == nil {
						n += fi.Size()
					}
				}
				return nil
			})
		}
		return n
	}
	var first int64
	for cycle := range 20 {
		in := storetest.Intent(t, "alice", fmt.Sprint("soak-", cycle), "fp", 200)
		if _, _, err := e.store.CreateIntent(ctx, in); err != nil {
			t.Fatal(err)
		}
		for {
			cs, err := e.store.ClaimTasks(ctx, store.ClaimParams{Owner: "soak", Limit: 100, TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if len(cs) == 0 {
				break
			}
			done := make([]store.Completion, len(cs))
			for i, c := range cs {
				body := bytes.Repeat([]byte(fmt.Sprintf("%d-%s|", cycle, c.ID)), 200) // ~8 KB, distinct
				info, err := blobs.Put(ctx, bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				done[i] = store.Completion{Lease: c.Lease, Asset: intent.Asset{ID: c.ID + "-a", SHA256: info.SHA256,
					ContentType: "image/png", Size: info.Size, Width: 1, Height: 1}}
			}
			if _, err := e.store.CompleteLeases(ctx, done); err != nil {
				t.Fatal(err)
			}
		}
		full := size()
		if _, err := prunePass(ctx, e.store, blobs, e.reclaim, time.Now().Add(time.Second), false, 0); err != nil {
			t.Fatal(err)
		}
		got := size()
		if cycle == 0 {
			// The space really comes back, not only stops growing.
			if got > full/2 {
				t.Fatalf("first cycle: %d bytes before the prune, %d after; want less than half", full, got)
			}
			first = got
			continue
		}
		if float64(got) > 1.2*float64(first) {
			t.Fatalf("cycle %d: studio.db + assets/ %d bytes, more than 20%% over the first cycle's %d", cycle, got, first)
		}
	}
	t.Logf("studio.db + assets/ after 20 cycles of 200 tasks: %d bytes (first cycle %d)", size(), first)
}

// createSucceeded creates a one-frame batch under requestID and waits for
// it to succeed.
func createSucceeded(t *testing.T, c *client, requestID string) batchAnswer {
	t.Helper()
	ctx := context.Background()
	var b batchAnswer
	if resp, err := c.do(ctx, "POST", "/v1/generations", generation(requestID, "f01"), &b); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %v", resp, err)
	}
	waitFor(t, 60*time.Second, "the batch to end", func() bool {
		var got batchAnswer
		_, err := c.do(ctx, "GET", "/v1/batches/"+b.ID, nil, &got)
		return err == nil && got.State == "succeeded"
	})
	return b
}
