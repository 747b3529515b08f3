package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"studio/blob"
	"studio/intent"
	"studio/store/sqlite"
)

// The workers' process tests: the real binary, separate worker processes
// on one SQLite data directory, signals. State is polled with deadlines;
// nothing is timed.

// taskAnswer is a task as GET /v1/batches/{id}/tasks lists it.
type taskAnswer struct {
	ID         string       `json:"id"`
	BatchID    string       `json:"batch_id"`
	Collection string       `json:"collection"`
	Frame      string       `json:"frame"`
	Generator  string       `json:"generator"`
	Candidate  int          `json:"candidate"`
	State      intent.State `json:"state"`
	Attempts   int          `json:"attempts"`
	AssetID    *string      `json:"asset_id"`
	Error      *string      `json:"error"`
	UpdatedAt  string       `json:"updated_at"`
	// GenerationCalls and History are what the task bought and what
	// happened to it.
	GenerationCalls int      `json:"generation_calls"`
	History         []string `json:"history"`
}

// fullBatch is a batch answer with its counts.
type fullBatch struct {
	ID        string        `json:"id"`
	State     intent.State  `json:"state"`
	TaskCount int           `json:"task_count"`
	Counts    intent.Counts `json:"counts"`
	UpdatedAt string        `json:"updated_at"`
}

// farm is one data directory: an API process (with or without in-process
// workers), its token, and worker processes started on demand.
type farm struct {
	t     *testing.T
	data  string
	api   *proc
	c     *client
	store *sqlite.Store
	blobs *blob.FS
}

// newFarm starts `studio serve` on a new data directory with the given
// extra flags (--workers 0 unless they say otherwise).
func newFarm(t *testing.T, serveFlags ...string) *farm {
	t.Helper()
	data := t.TempDir()
	args := append([]string{"serve", "--data", data, "--addr", "127.0.0.1:0", "--workers", "0"}, serveFlags...)
	api := startProcess(t, nil, args...)
	f := &farm{t: t, data: data, api: api, c: newClient(t, api.Addr, readToken(t, data))}
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(data, "studio.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f.store = s
	b, err := blob.NewFS(filepath.Join(data, "assets"))
	if err != nil {
		t.Fatal(err)
	}
	f.blobs = b
	return f
}

// worker starts `studio worker` on the farm's data directory.
func (f *farm) worker(flags ...string) *proc {
	f.t.Helper()
	return startProcess(f.t, nil, append([]string{"worker", "--data", f.data}, flags...)...)
}

// generate posts a generation and answers the batch.
func (f *farm) generate(c *client, body map[string]any) fullBatch {
	f.t.Helper()
	var b fullBatch
	resp, err := c.do(context.Background(), "POST", "/v1/generations", body, &b)
	if err != nil || resp.StatusCode != http.StatusCreated {
		f.t.Fatalf("POST /v1/generations: %v, %v", resp, err)
	}
	return b
}

func (f *farm) batch(c *client, id string) fullBatch {
	f.t.Helper()
	var b fullBatch
	resp, err := c.do(context.Background(), "GET", "/v1/batches/"+id, nil, &b)
	if err != nil || resp.StatusCode != http.StatusOK {
		f.t.Fatalf("GET batch: %v, %v", resp, err)
	}
	return b
}

// waitBatch polls the batch until cond holds, for up to d.
func (f *farm) waitBatch(c *client, id string, d time.Duration, what string, cond func(fullBatch) bool) fullBatch {
	f.t.Helper()
	var b fullBatch
	pollFor(f.t, d, what, func() bool {
		b = f.batch(c, id)
		return cond(b)
	})
	return b
}

// pollFor polls cond until it holds or d passes.
func pollFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func batchEnded(b fullBatch) bool { return b.Counts.Ended() == b.TaskCount }

// tasks lists every task of a batch, through the API.
func (f *farm) tasks(c *client, id string) []taskAnswer {
	f.t.Helper()
	var all []taskAnswer
	cursor := ""
	for {
		path := "/v1/batches/" + id + "/tasks?limit=500"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var page struct {
			Items      []taskAnswer `json:"items"`
			NextCursor *string      `json:"next_cursor"`
		}
		resp, err := c.do(context.Background(), "GET", path, nil, &page)
		if err != nil || resp.StatusCode != http.StatusOK {
			f.t.Fatalf("GET tasks: %v, %v", resp, err)
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil {
			return all
		}
		cursor = *page.NextCursor
	}
}

// checkAssets proves every succeeded task of the batch names one asset,
// the asset names the task, and its bytes are stored; it answers the
// assets by task id.
func (f *farm) checkAssets(actor string, ts []taskAnswer) map[string]intent.Asset {
	f.t.Helper()
	out := map[string]intent.Asset{}
	ctx := context.Background()
	for _, tk := range ts {
		a, err := f.store.AssetForTask(ctx, tk.ID)
		if tk.State != intent.StateSucceeded {
			if err == nil {
				f.t.Fatalf("task %s is %s but has an asset", tk.ID, tk.State)
			}
			continue
		}
		if err != nil || tk.AssetID == nil || *tk.AssetID != a.ID || a.Actor != actor {
			f.t.Fatalf("task %+v: asset %+v, %v", tk, a, err)
		}
		if ok, err := f.blobs.Exists(ctx, a.SHA256); err != nil || !ok {
			f.t.Fatalf("asset %s of task %s has no bytes", a.ID, tk.ID)
		}
		out[tk.ID] = a
	}
	return out
}

// workGeneration asks for sets x frames tasks of one generator (or both,
// for "auto"), small images, each waiting delayMS in the generator.
func workGeneration(requestID string, sets, frames int, providers []string, params map[string]any) map[string]any {
	var ss []map[string]any
	for i := range sets {
		var fs []string
		for j := range frames {
			fs = append(fs, fmt.Sprintf("f%02d", j))
		}
		ss = append(ss, map[string]any{"collection": fmt.Sprintf("set-%d", i), "frames": fs})
	}
	body := map[string]any{"request_id": requestID, "prompt": "a robot waving", "sets": ss}
	p := map[string]any{"width": 16, "height": 16}
	for k, v := range params {
		p[k] = v
	}
	body["params"] = p
	if providers != nil {
		body["providers"] = providers
	}
	return body
}

// stopQuiet SIGSTOPs p at a moment it holds no write transaction. SQLite
// has one writer at a time: a process stopped inside a transaction holds
// every other one up until it runs again (a limit of the engine, not of
// the workers: a stopped PostgreSQL client holds only its own rows). So
// the test stops the worker, waits until every thread of it is stopped,
// checks the write lock is free, and if not lets it run a moment and stops
// it again.
//
// The wait matters: kill(2) returns before the process has stopped. A
// thread preempted inside a system call (likely on a loaded machine)
// finishes that call before it stops, so a check made in between could
// find the lock free and the worker then take it and stop holding it:
// every other process then waits out its busy_timeout and fails with
// SQLITE_BUSY (seen as the second worker's migrate failing).
func (f *farm) stopQuiet(p *proc) {
	f.t.Helper()
	// A connection that does not wait for the lock: busy at once if taken.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(f.data, "studio.db")+"?_pragma=busy_timeout(0)&_txlock=immediate")
	if err != nil {
		f.t.Fatal(err)
	}
	defer db.Close()
	for range 100 {
		p.signal(syscall.SIGSTOP)
		p.waitStopped(time.Minute)
		tx, err := db.Begin()
		if err == nil {
			tx.Rollback()
			return
		}
		p.signal(syscall.SIGCONT)
		time.Sleep(5 * time.Millisecond)
	}
	f.t.Fatal("the worker never stopped outside a write transaction")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// logHas says whether a process logged a JSON line with msg (and, if
// given, the attribute key=value).
func logHas(p *proc, msg string) bool {
	for _, line := range strings.Split(p.logs.String(), "\n") {
		var rec struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
			return true
		}
	}
	return false
}

// TestWorkersBatchSucceedsWithSameImages: a 12-task batch run by serve's
// own workers succeeds; every asset's bytes hash to its sha256 and its
// ETag; the same inputs and seed in another batch give the same bytes.
func TestWorkersBatchSucceedsWithSameImages(t *testing.T) {
	t.Parallel()
	f := newFarm(t, "--workers", "4")
	body := generation("twelve", "f01", "f02")
	body["params"] = map[string]any{"width": 48, "height": 32}
	first := f.generate(f.c, body)
	if first.TaskCount != 12 {
		t.Fatalf("task_count %d, want 12", first.TaskCount)
	}
	body["request_id"] = "twelve-again"
	second := f.generate(f.c, body)
	images := map[string][]byte{}
	for i, id := range []string{first.ID, second.ID} {
		b := f.waitBatch(f.c, id, 2*time.Minute, "the batch to end", batchEnded)
		if b.State != intent.StateSucceeded || b.Counts.Succeeded != 12 {
			t.Fatalf("batch %+v", b)
		}
		ts := f.tasks(f.c, id)
		f.checkAssets("local", ts)
		for _, tk := range ts {
			var a assetAnswer
			if resp, err := f.c.do(context.Background(), "GET", "/v1/assets/"+*tk.AssetID, nil, &a); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET asset: %v %v", resp, err)
			}
			req, _ := http.NewRequest("GET", f.c.base+"/v1/assets/"+a.ID+"/content", nil)
			req.Header.Set("Authorization", "Bearer "+f.c.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			sum := sha256.Sum256(data)
			if resp.StatusCode != http.StatusOK || hex.EncodeToString(sum[:]) != a.SHA256 ||
				resp.Header.Get("ETag") != `"`+a.SHA256+`"` || resp.Header.Get("Content-Type") != "image/png" ||
				a.Width != 48 || a.Height != 32 || a.Size != int64(len(data)) || a.TaskID == nil || *a.TaskID != tk.ID {
				t.Fatalf("asset %+v: status %d, %d bytes hashing to %x, ETag %s", a, resp.StatusCode, len(data), sum, resp.Header.Get("ETag"))
			}
			key := fmt.Sprintf("%s/%s/%d", tk.Frame, tk.Generator, tk.Candidate)
			if i == 0 {
				images[key] = data
			} else if string(images[key]) != string(data) {
				t.Fatalf("%s: the second batch's image differs from the first's", key)
			}
		}
	}
	if len(images) != 12 {
		t.Fatalf("%d distinct tasks", len(images))
	}
}

// TestWorkersRetries: fail_attempts 2 succeeds on attempt 3; more failures
// than --max-attempts end failed with the error kept.
func TestWorkersRetries(t *testing.T) {
	t.Parallel()
	f := newFarm(t, "--workers", "4", "--retry-base", "20ms", "--max-attempts", "3")
	flaky := f.generate(f.c, workGeneration("flaky", 1, 3, []string{"sketch"}, map[string]any{"fail_attempts": 2}))
	broken := f.generate(f.c, workGeneration("broken", 1, 2, []string{"mosaic"}, map[string]any{"fail_attempts": 5}))
	b := f.waitBatch(f.c, flaky.ID, 2*time.Minute, "the flaky batch to end", batchEnded)
	if b.State != intent.StateSucceeded {
		t.Fatalf("flaky batch %+v", b)
	}
	for _, tk := range f.tasks(f.c, flaky.ID) {
		if tk.Attempts != 3 || tk.Error != nil {
			t.Fatalf("flaky task %+v: want 3 attempts, no error", tk)
		}
	}
	b = f.waitBatch(f.c, broken.ID, 2*time.Minute, "the broken batch to end", batchEnded)
	if b.State != intent.StateFailed || b.Counts.Failed != 2 {
		t.Fatalf("broken batch %+v", b)
	}
	for _, tk := range f.tasks(f.c, broken.ID) {
		if tk.State != intent.StateFailed || tk.Attempts != 3 || tk.Error == nil ||
			!strings.Contains(*tk.Error, "attempt 3") || !strings.Contains(*tk.Error, "simulated failure") || tk.AssetID != nil {
			t.Fatalf("broken task %+v", tk)
		}
	}
}

// TestWorkerKilledMidBatch: a worker SIGKILLed in the middle of its tasks;
// a new one finishes the batch: one asset per task, none without bytes.
func TestWorkerKilledMidBatch(t *testing.T) {
	t.Parallel()
	f := newFarm(t)
	b := f.generate(f.c, workGeneration("crash", 2, 30, nil, map[string]any{"delay_ms": 100}))
	if b.TaskCount != 120 {
		t.Fatalf("task_count %d", b.TaskCount)
	}
	w := f.worker("--concurrency", "8", "--lease-ttl", "1s")
	// The worker is stopped (SIGSTOP) before the batch is read, so that
	// the tasks seen running are still running when the kill lands; a
	// look that finds too few is followed by SIGCONT and another. It is
	// stopped outside a write transaction (stopQuiet): stopped inside one,
	// it may have written its commit to the WAL already (the next reader
	// finds it, kill or not), and it can make other processes' reads fail
	// (SQLITE_PROTOCOL; see docs/workers.md).
	pollFor(t, 2*time.Minute, "tasks done and running before the kill", func() bool {
		f.stopQuiet(w)
		if cur := f.batch(f.c, b.ID); cur.Counts.Succeeded >= 16 && cur.Counts.Running > 0 {
			return true
		}
		w.signal(syscall.SIGCONT)
		return false
	})
	w.signal(syscall.SIGKILL)
	w.wait(30 * time.Second)
	mid := f.batch(f.c, b.ID)
	if mid.Counts.Running == 0 {
		t.Fatalf("no task was running when the worker died: %+v", mid)
	}
	f.worker("--concurrency", "8", "--lease-ttl", "1s")
	done := f.waitBatch(f.c, b.ID, 3*time.Minute, "the batch to end", batchEnded)
	if done.State != intent.StateSucceeded {
		t.Fatalf("batch %+v", done)
	}
	ts := f.tasks(f.c, b.ID)
	f.checkAssets("local", ts)
	retaken := 0
	for _, tk := range ts {
		if tk.Attempts > 1 {
			retaken++
		}
	}
	if retaken == 0 {
		t.Fatal("no task was tried twice: the killed worker held none")
	}
	t.Logf("%d tasks taken over from the killed worker", retaken)
}

// TestWorkerStoppedPastLease: a worker SIGSTOPped while it runs a task,
// past its lease; another takes the task and finishes it; after SIGCONT the
// first records nothing.
func TestWorkerStoppedPastLease(t *testing.T) {
	t.Parallel()
	f := newFarm(t)
	b := f.generate(f.c, workGeneration("stale", 1, 2, []string{"sketch"}, map[string]any{"delay_ms": 3000}))
	first := f.worker("--concurrency", "2", "--lease-ttl", "1s")
	f.waitBatch(f.c, b.ID, time.Minute, "the first worker to run both tasks", func(b fullBatch) bool { return b.Counts.Running == 2 })
	f.stopQuiet(first)
	second := f.worker("--concurrency", "2", "--lease-ttl", "1s")
	done := f.waitBatch(f.c, b.ID, 2*time.Minute, "the second worker to finish", batchEnded)
	if done.State != intent.StateSucceeded {
		t.Fatalf("batch %+v: %s", done, mustJSON(t, f.tasks(f.c, b.ID)))
	}
	before := f.tasks(f.c, b.ID)
	assets := f.checkAssets("local", before)
	for _, tk := range before {
		if tk.Attempts < 2 {
			t.Fatalf("task %+v: want a second attempt (taken over)", tk)
		}
	}
	first.signal(syscall.SIGCONT)
	pollFor(t, time.Minute, "the woken worker to find its leases lost", func() bool {
		return logHas(first, "lease lost: the task is left to its new holder, nothing recorded")
	})
	after := f.tasks(f.c, b.ID)
	if j1, j2 := mustJSON(t, before), mustJSON(t, after); j1 != j2 {
		t.Fatalf("the woken worker changed tasks:\n%s\n%s", j1, j2)
	}
	if again := f.batch(f.c, b.ID); again != done {
		t.Fatalf("the woken worker changed the batch: %+v -> %+v", done, again)
	}
	for id, a := range f.checkAssets("local", after) {
		if j1, j2 := mustJSON(t, assets[id]), mustJSON(t, a); j1 != j2 {
			t.Fatalf("task %s asset changed: %s -> %s", id, j1, j2)
		}
	}
	for _, w := range []*proc{first, second} {
		w.signal(syscall.SIGTERM)
		if code := w.wait(time.Minute); code != 0 {
			t.Fatalf("exit code %d after SIGTERM", code)
		}
	}
}

// TestManyWorkerProcesses: three worker processes of eight drain one
// 600-task batch. Every task succeeds exactly once: one claim (attempts
// 1: no second lease was ever taken on it), one success logged by one
// process, one asset with bytes; and all three processes took part.
func TestManyWorkerProcesses(t *testing.T) {
	t.Parallel()
	f := newFarm(t)
	b := f.generate(f.c, workGeneration("many", 5, 60, nil, nil))
	if b.TaskCount != 600 {
		t.Fatalf("task_count %d", b.TaskCount)
	}
	var ws []*proc
	for range 3 {
		// A lease long enough that none expires on a loaded machine: any
		// second claim of a task would then be a bug, and shows as
		// attempts 2.
		ws = append(ws, f.worker("--concurrency", "8", "--lease-ttl", "20s"))
	}
	done := f.waitBatch(f.c, b.ID, 5*time.Minute, "the batch to end", batchEnded)
	if done.State != intent.StateSucceeded || done.Counts.Succeeded != 600 {
		t.Fatalf("batch %+v", done)
	}
	ts := f.tasks(f.c, b.ID)
	f.checkAssets("local", ts)
	for _, tk := range ts {
		if tk.Attempts != 1 {
			t.Fatalf("task %+v claimed %d times", tk, tk.Attempts)
		}
	}
	// The processes' own records of what they completed.
	succeeded := map[string]int{}
	for i, w := range ws {
		w.signal(syscall.SIGTERM)
		if code := w.wait(time.Minute); code != 0 {
			t.Fatalf("worker %d exit code %d", i, code)
		}
		n := 0
		for _, line := range strings.Split(w.logs.String(), "\n") {
			var rec struct {
				Msg  string `json:"msg"`
				Task string `json:"task"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "task succeeded" {
				succeeded[rec.Task]++
				n++
			}
		}
		if n == 0 {
			t.Fatalf("worker %d completed nothing", i)
		}
		t.Logf("worker %d completed %d tasks", i, n)
	}
	for _, tk := range ts {
		if succeeded[tk.ID] != 1 {
			t.Fatalf("task %s logged as completed %d times", tk.ID, succeeded[tk.ID])
		}
	}
}

// TestWorkerSIGTERMHandsBack: SIGTERM with tasks in flight: the worker
// exits 0 after handing its leases back; the batch has no failure and
// finishes after a restart.
func TestWorkerSIGTERMHandsBack(t *testing.T) {
	t.Parallel()
	f := newFarm(t)
	b := f.generate(f.c, workGeneration("term", 1, 24, nil, map[string]any{"delay_ms": 5000}))
	w := f.worker("--concurrency", "8", "--lease-ttl", "2s", "--grace", "200ms")
	f.waitBatch(f.c, b.ID, time.Minute, "tasks in flight", func(b fullBatch) bool { return b.Counts.Running >= 8 })
	w.signal(syscall.SIGTERM)
	if code := w.wait(time.Minute); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	mid := f.batch(f.c, b.ID)
	if mid.Counts.Running != 0 || mid.Counts.Failed != 0 || mid.Counts.Queued == 0 || mid.State != intent.StateRunning {
		t.Fatalf("after SIGTERM: %+v; want every lease handed back, nothing failed", mid)
	}
	if !logHas(w, "workers stopped") {
		t.Fatal("the worker did not log its stop")
	}
	f.worker("--concurrency", "24", "--lease-ttl", "2s")
	done := f.waitBatch(f.c, b.ID, 3*time.Minute, "the batch to end", batchEnded)
	if done.State != intent.StateSucceeded {
		t.Fatalf("batch %+v", done)
	}
	f.checkAssets("local", f.tasks(f.c, b.ID))
}

// TestWorkersCancel: cancel during a run: queued tasks at once, running
// ones at their next step (here: at once, by the lease renewal), no asset
// for a canceled task; a second cancel answers the same batch.
func TestWorkersCancel(t *testing.T) {
	t.Parallel()
	f := newFarm(t)
	b := f.generate(f.c, workGeneration("cancel", 1, 20, []string{"sketch"}, map[string]any{"delay_ms": 60000}))
	f.worker("--concurrency", "4", "--lease-ttl", "1s")
	// Running counts the tasks leased: the four running and those the
	// worker claimed ahead.
	f.waitBatch(f.c, b.ID, time.Minute, "tasks running", func(b fullBatch) bool { return b.Counts.Running >= 4 })
	var answer fullBatch
	if resp, err := f.c.do(context.Background(), "POST", "/v1/batches/"+b.ID+"/cancel", nil, &answer); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %v %v", resp, err)
	}
	if answer.Counts.Queued != 0 || answer.Counts.Running == 0 || answer.Counts.Canceled+answer.Counts.Running != 20 {
		t.Fatalf("cancel answered %+v; want the queued canceled, the running still running", answer)
	}
	done := f.waitBatch(f.c, b.ID, time.Minute, "the running tasks to stop", batchEnded)
	if done.State != intent.StateCanceled || done.Counts.Canceled != 20 {
		t.Fatalf("batch %+v", done)
	}
	f.checkAssets("local", f.tasks(f.c, b.ID))
	var again fullBatch
	if resp, err := f.c.do(context.Background(), "POST", "/v1/batches/"+b.ID+"/cancel", nil, &again); err != nil || resp.StatusCode != http.StatusOK || again != done {
		t.Fatalf("second cancel: %+v (%v %v), want %+v", again, resp, err, done)
	}
}

// TestWorkersFairShare: a 2-task batch of another actor, submitted behind
// a 600-task batch, is done long before the big one drains.
func TestWorkersFairShare(t *testing.T) {
	t.Parallel()
	f := newFarm(t)
	tok := startProcess(t, nil, "token", "create", "--actor", "bob", "--data", f.data)
	if code := tok.wait(time.Minute); code != 0 {
		t.Fatalf("token create: exit %d", code)
	}
	bob := newClient(t, f.api.Addr, strings.TrimSpace(tok.stdout.String()))
	big := f.generate(f.c, workGeneration("big", 5, 60, nil, map[string]any{"delay_ms": 50}))
	f.worker("--concurrency", "2", "--lease-ttl", "5s")
	f.waitBatch(f.c, big.ID, time.Minute, "the big batch to start", func(b fullBatch) bool { return b.Counts.Succeeded > 0 })
	small := f.generate(bob, workGeneration("small", 1, 1, nil, nil))
	if small.TaskCount != 2 {
		t.Fatalf("small batch of %d tasks", small.TaskCount)
	}
	done := f.waitBatch(bob, small.ID, 2*time.Minute, "the small batch to end", batchEnded)
	if done.State != intent.StateSucceeded {
		t.Fatalf("small batch %+v", done)
	}
	if got := f.batch(f.c, big.ID); got.Counts.Queued < 500 {
		t.Fatalf("the big batch was nearly drained before the small one ended: %+v", got)
	}
}
