package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"studio/store/postgres"
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

// pgStore opens the test schema's store, for the checks a test makes
// behind the processes' backs.
func pgStore(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// bigGeneration asks for sets x frames x 2 generators (auto) tasks of
// small images, each waiting delayMS in the generator.
func bigGeneration(requestID string, sets, frames, delayMS int) map[string]any {
	var ss []map[string]any
	for i := range sets {
		var fs []string
		for j := range frames {
			fs = append(fs, fmt.Sprintf("f%02d", j))
		}
		ss = append(ss, map[string]any{"collection": fmt.Sprintf("set-%d", i), "frames": fs})
	}
	return map[string]any{
		"request_id": requestID,
		"prompt":     "a robot waving",
		"sets":       ss,
		"params":     map[string]any{"width": 16, "height": 16, "delay_ms": delayMS},
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPostgresWorkersDrainOneKilled: three worker processes drain one
// 600-task batch; one is SIGKILLed mid-run and the others finish: every
// task succeeds once, with exactly one asset whose bytes are in the
// database, and the killed worker's tasks were taken over.
func TestPostgresWorkersDrainOneKilled(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	api := startProcess(t, []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + t.TempDir(), "STUDIO_WORKERS=0"}, "serve", "--addr", "127.0.0.1:0")
	token := pgToken(t, url, "alice")
	var b batchAnswer
	resp, err := newClient(t, api.Addr, token).do(context.Background(), "POST", "/v1/generations", bigGeneration("drain", 5, 60, 20), &b)
	if err != nil || resp.StatusCode != http.StatusCreated || b.TaskCount != 600 {
		t.Fatalf("create: %v, %+v, %v", resp, b, err)
	}
	var workers []*proc
	for range 3 {
		workers = append(workers, startProcess(t, []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + t.TempDir()},
			"worker", "--concurrency", "4", "--lease-ttl", "1s"))
	}
	s := pgStore(t, url)
	ctx := context.Background()
	succeeded := func() int {
		got, err := s.GetBatch(ctx, "alice", b.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Counts.Succeeded
	}
	waitFor(t, 3*time.Minute, "60 tasks done before the kill", func() bool { return succeeded() >= 60 })
	// Kill the first worker while it holds leases, so that there is work to
	// take over (the others may have claimed ahead of it). It is stopped
	// (SIGSTOP) before its leases are counted, so that it cannot end them
	// between the count and the kill; a stopped worker holding none is let
	// go on and looked at again.
	//
	// kill(2) returns before the process stops, and a stopped process may
	// have sent a COMMIT that the database has not yet applied: the
	// completion of every task it holds can be in flight (a worker
	// completes its tasks in one transaction). So the test waits until
	// every thread has stopped, and counts only the leases whose rows no
	// transaction has locked (SKIP LOCKED). A transaction the stopped
	// worker has begun needs one more message from it to commit, so those
	// leases are ones it can no longer end.
	owner := workerOwner(t, workers[0])
	waitFor(t, 3*time.Minute, "the first worker to hold a lease", func() bool {
		workers[0].signal(syscall.SIGSTOP)
		workers[0].waitStopped(time.Minute)
		var held int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM tasks
				WHERE batch_id = $1 AND state = 'running' AND lease_owner = $2 FOR SHARE SKIP LOCKED) AS held`,
			b.ID, owner).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held == 0 {
			workers[0].signal(syscall.SIGCONT)
		}
		return held > 0
	})
	workers[0].signal(syscall.SIGKILL)
	workers[0].wait(30 * time.Second)
	waitFor(t, 5*time.Minute, "the batch to succeed", func() bool { return succeeded() == 600 })

	got, err := s.GetBatch(ctx, "alice", b.ID)
	if err != nil || got.State != "succeeded" || got.Counts.Succeeded != 600 {
		t.Fatalf("batch %+v, %v", got, err)
	}
	var tasks, withAsset, assets, distinctTasks, missingBytes, retried int
	if err := s.Pool().QueryRow(ctx, `SELECT
			(SELECT count(*) FROM tasks WHERE batch_id = $1),
			(SELECT count(*) FROM tasks t JOIN assets a ON a.id = t.asset_id AND a.task_id = t.id WHERE t.batch_id = $1 AND t.state = 'succeeded'),
			(SELECT count(*) FROM assets a JOIN tasks t ON t.id = a.task_id WHERE t.batch_id = $1),
			(SELECT count(DISTINCT a.task_id) FROM assets a JOIN tasks t ON t.id = a.task_id WHERE t.batch_id = $1),
			(SELECT count(*) FROM assets a JOIN tasks t ON t.id = a.task_id WHERE t.batch_id = $1
				AND NOT EXISTS (SELECT 1 FROM blobs b WHERE b.sha256 = a.sha256)),
			(SELECT count(*) FROM tasks WHERE batch_id = $1 AND attempts > 1)`, b.ID).
		Scan(&tasks, &withAsset, &assets, &distinctTasks, &missingBytes, &retried); err != nil {
		t.Fatal(err)
	}
	if tasks != 600 || withAsset != 600 || assets != 600 || distinctTasks != 600 || missingBytes != 0 {
		t.Fatalf("%d tasks, %d succeeded naming their asset, %d assets for %d tasks, %d without bytes; want 600, 600, 600, 600, 0",
			tasks, withAsset, assets, distinctTasks, missingBytes)
	}
	if retried == 0 {
		t.Fatal("no task was tried twice: the killed worker held none")
	}
	t.Logf("%d tasks were taken over from the killed worker (or retried)", retried)
	for _, w := range workers[1:] {
		w.signal(syscall.SIGTERM)
		if code := w.wait(60 * time.Second); code != 0 {
			t.Fatalf("worker exit code %d after SIGTERM", code)
		}
	}
}

// TestPostgresWorkerStoppedPastLease: a worker SIGSTOPped while it runs a
// task, past its lease, finds on SIGCONT that another worker took the task
// over and finished it; it records nothing: one success, one asset, the
// task unchanged since.
func TestPostgresWorkerStoppedPastLease(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	api := startProcess(t, []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + t.TempDir(), "STUDIO_WORKERS=0"}, "serve", "--addr", "127.0.0.1:0")
	token := pgToken(t, url, "alice")
	var b batchAnswer
	body := bigGeneration("slow", 1, 1, 3000)
	body["providers"] = []string{"sketch"}
	resp, err := newClient(t, api.Addr, token).do(context.Background(), "POST", "/v1/generations", body, &b)
	if err != nil || resp.StatusCode != http.StatusCreated || b.TaskCount != 1 {
		t.Fatalf("create: %v, %+v, %v", resp, b, err)
	}
	s := pgStore(t, url)
	ctx := context.Background()
	type taskRow struct {
		state, owner string
		attempts     int
		fence        int64
		asset        string
		updated      time.Time
	}
	read := func() taskRow {
		var r taskRow
		if err := s.Pool().QueryRow(ctx, `SELECT state, COALESCE(lease_owner, ''), attempts, fence, COALESCE(asset_id, ''), updated_at
			FROM tasks WHERE batch_id = $1`, b.ID).Scan(&r.state, &r.owner, &r.attempts, &r.fence, &r.asset, &r.updated); err != nil {
			t.Fatal(err)
		}
		return r
	}
	env := func() []string { return []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + t.TempDir()} }
	first := startProcess(t, env(), "worker", "--concurrency", "1", "--lease-ttl", "1s")
	waitFor(t, time.Minute, "the first worker to claim the task", func() bool { return read().state == "running" })
	first.signal(syscall.SIGSTOP)
	first.waitStopped(time.Minute)
	stoppedAt := read()
	// The second worker's lease is the default: a loaded machine must not
	// make it lose the task too, which would count a third attempt.
	second := startProcess(t, env(), "worker", "--concurrency", "1")
	waitFor(t, 2*time.Minute, "the second worker to finish the task", func() bool { return read().state == "succeeded" })
	done := read()
	if done.attempts != 2 || done.fence <= stoppedAt.fence || done.asset == "" {
		t.Fatalf("after the takeover: %+v (stopped at %+v); want attempt 2 under a higher fence, with an asset", done, stoppedAt)
	}
	first.signal(syscall.SIGCONT)
	time.Sleep(5 * time.Second) // the first worker's generator wait ends; it tries to go on
	if after := read(); after.state != done.state || after.attempts != done.attempts || after.fence != done.fence ||
		after.asset != done.asset || after.owner != done.owner || !after.updated.Equal(done.updated) {
		t.Fatalf("the stopped worker changed the task after SIGCONT: %+v -> %+v", done, after)
	}
	var assets int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM assets a JOIN tasks t ON t.id = a.task_id WHERE t.batch_id = $1`, b.ID).Scan(&assets); err != nil {
		t.Fatal(err)
	}
	if assets != 1 {
		t.Fatalf("%d assets for the task, want 1", assets)
	}
	for _, w := range []*proc{first, second} {
		w.signal(syscall.SIGTERM)
		if code := w.wait(60 * time.Second); code != 0 {
			t.Fatalf("worker exit code %d after SIGTERM", code)
		}
	}
}

// BenchmarkPostgresDrain measures how fast 1, 2 and 4 worker processes
// (each running 4 tasks at once) drain 600-task batches of 16x16 images
// from one database, reported as tasks/s. The processes start once per
// case, outside the timing; the batches are made through a serve process
// without workers. Read the rates against the 1-process case of the same
// run: they grow with processes until the database (or, on a small
// machine, the CPU the processes share with it) is the limit.
func BenchmarkPostgresDrain(b *testing.B) {
	for _, procs := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("processes=%d", procs), func(b *testing.B) {
			url, _ := pgtest.Schema(b)
			api := startBenchProcess(b, []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + b.TempDir(), "STUDIO_WORKERS=0"},
				"serve", "--addr", "127.0.0.1:0")
			for range procs {
				startBenchProcess(b, []string{"STUDIO_DATABASE_URL=" + url, "STUDIO_DATA=" + b.TempDir()}, "worker", "--concurrency", "4")
			}
			var out, errb bytes.Buffer
			if code := run(context.Background(), []string{"token", "create", "--actor", "alice", "--database", url, "--data", b.TempDir()}, &out, &errb); code != 0 {
				b.Fatalf("token create: %s", errb.String())
			}
			c := &client{base: "http://" + api, token: strings.TrimSpace(out.String()), http: &http.Client{Timeout: time.Minute}}
			s, err := postgres.Open(context.Background(), postgres.Config{URL: url, MaxConns: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				body := bigGeneration(fmt.Sprintf("drain-%d", i), 10, 60, 0)
				body["providers"] = []string{"sketch"}
				var bt batchAnswer
				if resp, err := c.do(ctx, "POST", "/v1/generations", body, &bt); err != nil || resp.StatusCode != http.StatusCreated {
					b.Fatalf("create: %v, %v", resp, err)
				}
				for {
					got, err := s.GetBatch(ctx, "alice", bt.ID)
					if err != nil {
						b.Fatal(err)
					}
					if got.Counts.Ended() == got.TaskCount {
						if got.Counts.Succeeded != got.TaskCount {
							b.Fatalf("batch ended %+v", got.Counts)
						}
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			b.ReportMetric(float64(600*b.N)/time.Since(start).Seconds(), "tasks/s")
		})
	}
}

// startBenchProcess runs `studio args...` for a benchmark and answers the
// HTTP address once a serve process serves; the process gets SIGTERM at
// the end.
func startBenchProcess(b *testing.B, env []string, args ...string) string {
	b.Helper()
	cmd := exec.Command(studioBinary(b), args...)
	cmd.Env = append(append(os.Environ(), env...), "STUDIO_LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" {
				addr <- rec.Addr
			}
		}
	}()
	if args[0] != "serve" {
		return ""
	}
	select {
	case a := <-addr:
		return a
	case <-time.After(time.Minute):
		b.Fatal("serve did not start")
		return ""
	}
}

// workerOwner reads the lease owner a worker process logged at start.
func workerOwner(t *testing.T, p *proc) string {
	t.Helper()
	var owner string
	waitFor(t, time.Minute, "the worker to log its owner", func() bool {
		for _, line := range strings.Split(p.logs.String(), "\n") {
			var rec struct {
				Msg   string `json:"msg"`
				Owner string `json:"owner"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "workers started" && rec.Owner != "" {
				owner = rec.Owner
				return true
			}
		}
		return false
	})
	return owner
}
