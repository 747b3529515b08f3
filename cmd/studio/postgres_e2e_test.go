package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"studio/store/postgres/pgtest"
)

// The PostgreSQL process tests: real studio processes, each with a data
// directory of its own (they share no disk), meeting only in one database
// schema. They need STUDIO_TEST_POSTGRES_URL and are skipped without it.

// pgToken creates a token for actor with `studio token create` on the
// database.
func pgToken(t *testing.T, url, actor string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"token", "create", "--actor", actor, "--database", url, "--data", t.TempDir()}, &out, &errb); code != 0 {
		t.Fatalf("token create: exit %d: %s", code, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// TestPostgresTwoServeProcesses: 64 concurrent tries of one request id,
// split across two serve processes on one database, make one batch; with
// the database lock store (the default on PostgreSQL) they also plan once,
// with the memory lock store at most once per process.
func TestPostgresTwoServeProcesses(t *testing.T) {
	t.Parallel()
	for _, lockStore := range []string{"db", "memory"} {
		t.Run(lockStore, func(t *testing.T) {
			t.Parallel()
			url, _ := pgtest.Schema(t)
			var procs []*proc
			for range 2 {
				env := []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + t.TempDir(), "STUDIO_WORKERS=0"}
				if lockStore == "memory" {
					env = append(env, "STUDIO_LOCK_STORE=memory")
				}
				procs = append(procs, startProcess(t, env, "serve", "--addr", "127.0.0.1:0"))
			}
			if n := strings.Count(procs[0].stdout.String()+procs[1].stdout.String(), "Created a token"); n != 1 {
				t.Fatalf("the first token was created %d times, want once", n)
			}
			token := pgToken(t, url, "alice")
			clients := []*client{newClient(t, procs[0].Addr, token), newClient(t, procs[1].Addr, token)}

			const tries = 64
			var (
				mu      sync.Mutex
				wg      sync.WaitGroup
				ids     = map[string]int{}
				created int
				start   = make(chan struct{})
			)
			for i := range tries {
				wg.Go(func() {
					<-start
					var out batchAnswer
					resp, err := clients[i%2].do(context.Background(), "POST", "/v1/generations", generation("dup", "f01", "f02"), &out)
					if err != nil {
						t.Errorf("try %d: %v", i, err)
						return
					}
					if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
						t.Errorf("try %d: status %d", i, resp.StatusCode)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					ids[out.ID]++
					if resp.StatusCode == http.StatusCreated {
						created++
					}
				})
			}
			close(start)
			wg.Wait()
			if len(ids) != 1 || created != 1 {
				t.Fatalf("%d tries named %d batches and created %d; want 1 and 1: %v", tries, len(ids), created, ids)
			}
			var list struct {
				Items []batchAnswer `json:"items"`
			}
			if _, err := clients[1].do(context.Background(), "GET", "/v1/batches?limit=500", nil, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 || list.Items[0].TaskCount != 12 {
				t.Fatalf("stored batches %+v, want one of 12 tasks", list.Items)
			}
			for _, p := range procs {
				p.signal(syscall.SIGTERM)
				if code := p.wait(30 * time.Second); code != 0 {
					t.Fatalf("exit code %d after SIGTERM", code)
				}
			}
			plans := strings.Count(procs[0].logs.String(), `"msg":"planned"`) + strings.Count(procs[1].logs.String(), `"msg":"planned"`)
			switch {
			case lockStore == "db" && plans != 1:
				t.Fatalf("%d plans with the database lock store, want 1", plans)
			case plans < 1 || plans > 2:
				t.Fatalf("%d plans with a lock per process, want 1 or 2", plans)
			}
			t.Logf("lock store %s: %d plans for %d tries across 2 processes", lockStore, plans, tries)
		})
	}
}

// TestPostgresMigrate: two `studio migrate` processes at once on an empty
// schema both succeed, a third run finds nothing to do, /readyz of a
// process on the schema answers ready and /metrics reports the database.
func TestPostgresMigrate(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	bin := studioBinary(t)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			out, err := exec.Command(bin, "migrate", "--database", url).CombinedOutput()
			if err != nil {
				t.Errorf("migrate %d: %v\n%s", i, err, out)
			}
		})
	}
	wg.Wait()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"migrate", "--database", url}, &out, &errb); code != 0 {
		t.Fatalf("migrate again: exit %d: %s", code, errb.String())
	}
	p := startProcess(t, []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + t.TempDir(), "STUDIO_WORKERS=0"}, "serve", "--addr", "127.0.0.1:0")
	resp, err := newClient(t, p.Addr, "").do(context.Background(), "GET", "/readyz", nil, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %v, %v", resp, err)
	}
	// /metrics reports the database: its pool and the tasks by state.
	mresp, err := http.Get("http://" + p.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	text, err := io.ReadAll(mresp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"studio_pgxpool_max_conns ", "studio_pgxpool_acquires_total ", `studio_tasks{state="queued"} 0`} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

// TestPostgresAssetBytesShared: an image uploaded through one serve
// process is served, byte for byte, by another with a data directory of
// its own: on PostgreSQL the bytes live in the database.
func TestPostgresAssetBytesShared(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	var procs []*proc
	for range 2 {
		env := []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + t.TempDir(), "STUDIO_WORKERS=0"}
		procs = append(procs, startProcess(t, env, "serve", "--addr", "127.0.0.1:0"))
	}
	token := pgToken(t, url, "alice")
	ctx := context.Background()
	img := pngImage(t, 24, 12, 99)
	var up assetAnswer
	resp, err := newClient(t, procs[0].Addr, token).upload(ctx, "image/png", bytes.NewReader(img), &up, "Idempotency-Key", "logo")
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %v, %v", resp, err)
	}
	other := newClient(t, procs[1].Addr, token)
	req, err := http.NewRequestWithContext(ctx, "GET", other.base+"/v1/assets/"+up.ID+"/content", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	got, err := other.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Body.Close()
	body, err := io.ReadAll(got.Body)
	if err != nil || got.StatusCode != http.StatusOK || !bytes.Equal(body, img) {
		t.Fatalf("content from the other process: %d, %d bytes (want %d), %v", got.StatusCode, len(body), len(img), err)
	}
	if etag := got.Header.Get("ETag"); etag != `"`+up.SHA256+`"` {
		t.Fatalf("ETag %q, want the sha256 %q", etag, up.SHA256)
	}
	// The replay of the key through the other process names the same asset.
	var again assetAnswer
	resp, err = other.upload(ctx, "image/png", bytes.NewReader(img), &again, "Idempotency-Key", "logo")
	if err != nil || resp.StatusCode != http.StatusOK || again.ID != up.ID {
		t.Fatalf("replay through the other process: %v, %+v, %v", resp, again, err)
	}
}
