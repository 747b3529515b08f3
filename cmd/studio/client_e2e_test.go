package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiclient "studio/client"
	"studio/store/postgres/pgtest"
)

// The caller's side against the real binary: the client package and the
// `studio submit` family through a proxy that loses answers, resets
// connections and delays; `studio submit` killed with SIGKILL after the
// server took its request; event streams of batches drained by separate
// worker processes.

// faultProxy stands between callers and a server and breaks requests at
// random (from a seed; the interleaving of concurrent callers still
// varies): it resets the connection before forwarding, answers 503 without
// forwarding, delays, or forwards and then drops the server's answer (the
// request took effect; the caller never hears). Faults are bounded: after
// maxFaults faults in a row for one request (same method, path, headers
// that name the intent, and body) it forwards and answers.
type faultProxy struct {
	target    string
	maxFaults int
	mu        sync.Mutex
	rnd       *rand.Rand
	streak    map[string]int
	// counts by kind
	resets, unavailable, delays, drops, passes atomic.Int64
	http                                       *http.Client
}

func newFaultProxy(t *testing.T, target string, seed uint64, maxFaults int) (*faultProxy, string) {
	t.Logf("fault proxy seed %d", seed)
	p := &faultProxy{target: target, maxFaults: maxFaults, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		streak: map[string]int{}, http: &http.Client{Timeout: time.Minute}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// fault kinds
const (
	fPass = iota
	fReset
	fUnavailable
	fDelay
	fDrop
)

func (p *faultProxy) roll(key string) (kind int, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.streak[key] >= p.maxFaults {
		p.streak[key] = 0
		return fPass, 0
	}
	switch n := p.rnd.IntN(10); {
	case n < 4:
		kind = fPass
	case n < 5:
		kind = fReset
	case n < 6:
		kind = fUnavailable
	case n < 8:
		kind = fDelay
	default:
		kind = fDrop
	}
	if kind == fPass || kind == fDelay {
		p.streak[key] = 0
	} else {
		p.streak[key]++
	}
	return kind, time.Duration(p.rnd.IntN(30)) * time.Millisecond
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	sum := sha256.Sum256(body)
	key := r.Method + " " + r.URL.Path + " " + r.Header.Get("Idempotency-Key") + " " + hex.EncodeToString(sum[:])
	kind, delay := p.roll(key)
	switch kind {
	case fReset:
		p.resets.Add(1)
		reset(w)
		return
	case fUnavailable:
		p.unavailable.Add(1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The proxy is busy."}`)
		return
	case fDelay:
		p.delays.Add(1)
		time.Sleep(delay)
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header = r.Header.Clone()
	resp, err := p.http.Do(req)
	if err != nil {
		reset(w)
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if kind == fDrop || err != nil {
		p.drops.Add(1)
		reset(w) // the server handled it; the answer is lost
		return
	}
	if kind == fPass {
		p.passes.Add(1)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// reset drops the connection with a TCP reset.
func reset(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// serveForClients starts `studio serve` (in-process workers as given) on
// a new data directory and answers it, its data directory and token.
func serveForClients(t *testing.T, workers string, env ...string) (*proc, string, string) {
	t.Helper()
	data := t.TempDir()
	p := startProcess(t, env, "serve", "--data", data, "--addr", "127.0.0.1:0", "--workers", workers)
	return p, data, readToken(t, data)
}

func mustClient(t *testing.T, base, token string, r apiclient.Retry) *apiclient.Client {
	t.Helper()
	c, err := apiclient.New(base, apiclient.WithToken(token), apiclient.WithRetry(r))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSubmissionsThroughFaults: 48 logical submissions from 8 goroutines
// through the fault proxy make exactly 48 batches, each answered with its
// own, and the proxy did lose answers the server had acted on.
func TestSubmissionsThroughFaults(t *testing.T) {
	t.Parallel()
	api, _, token := serveForClients(t, "0")
	proxy, front := newFaultProxy(t, "http://"+api.Addr, uint64(time.Now().UnixNano()), 5)
	c := mustClient(t, front, token, apiclient.Retry{Attempts: 10, Base: time.Millisecond, Max: 10 * time.Millisecond, AttemptTimeout: 30 * time.Second})
	const n, g = 48, 8
	var mu sync.Mutex
	answers := map[string]string{} // batch id -> request id
	replays := 0
	var wg sync.WaitGroup
	for w := range g {
		wg.Go(func() {
			for i := w; i < n; i += g {
				res, err := c.CreateGeneration(context.Background(), apiclient.GenerationRequest{
					Prompt: fmt.Sprintf("submission %d", i),
					Sets:   []apiclient.FrameSet{{Collection: "c", Frames: []string{"f1", "f2"}}},
				})
				if err != nil {
					t.Errorf("submission %d: %v", i, err)
					return
				}
				mu.Lock()
				if prev, ok := answers[res.Record.ID]; ok {
					t.Errorf("batch %s answered to request ids %s and %s", res.Record.ID, prev, res.RequestID)
				}
				answers[res.Record.ID] = res.RequestID
				if res.Replayed {
					replays++
				}
				mu.Unlock()
				if res.Record.RequestID != res.RequestID || res.Record.Prompt != fmt.Sprintf("submission %d", i) {
					t.Errorf("submission %d answered %+v", i, res.Record)
				}
			}
		})
	}
	wg.Wait()
	direct := mustClient(t, "http://"+api.Addr, token, apiclient.Retry{})
	page, err := direct.ListBatches(context.Background(), apiclient.ListOptions{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != n || len(answers) != n {
		t.Fatalf("%d batches on the server, %d answered, want %d", len(page.Items), len(answers), n)
	}
	for _, b := range page.Items {
		if answers[b.ID] != b.RequestID {
			t.Fatalf("batch %s (request id %s) was not answered as such", b.ID, b.RequestID)
		}
	}
	t.Logf("faults: %d resets, %d 503s, %d delays, %d answers dropped, %d passed; %d answers were replays",
		proxy.resets.Load(), proxy.unavailable.Load(), proxy.delays.Load(), proxy.drops.Load(), proxy.passes.Load(), replays)
	if proxy.drops.Load() == 0 || proxy.resets.Load() == 0 || proxy.unavailable.Load() == 0 || replays == 0 {
		t.Fatalf("the proxy did not break enough to test anything")
	}

	// The command line through the same proxy: four files submitted by
	// four processes at once, twice each, make four batches.
	journal := t.TempDir()
	var files []string
	for i := range 4 {
		f := filepath.Join(t.TempDir(), "req.json")
		body := fmt.Sprintf(`{"prompt": "cli %d", "sets": [{"collection": "c", "frames": ["a"]}]}`, i)
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	ids := make([][2]string, 4)
	for round := range 2 {
		var wg sync.WaitGroup
		for i, f := range files {
			wg.Go(func() {
				cmd := exec.Command(studioBinary(t), "submit", f, "--server", front, "--token", token, "--journal", journal, "--retries", "8")
				var out, errb bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				if err := cmd.Run(); err != nil {
					t.Errorf("submit %s: %v\n%s", f, err, errb.String())
					return
				}
				ids[i][round] = strings.TrimSpace(out.String())
			})
		}
		wg.Wait()
	}
	page, err = direct.ListBatches(context.Background(), apiclient.ListOptions{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != n+4 {
		t.Fatalf("%d batches after the command line's, want %d", len(page.Items), n+4)
	}
	for i, pair := range ids {
		if pair[0] == "" || pair[0] != pair[1] {
			t.Fatalf("file %d: submitted as %q then %q", i, pair[0], pair[1])
		}
	}
}

// holdProxy forwards everything, except that it never answers a POST to
// /v1/generations while held: it forwards it, sends the server's answer
// to handled, and keeps the caller waiting.
type holdProxy struct {
	target  string
	held    atomic.Bool
	handled chan []byte
}

func (p *holdProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		reset(w)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if r.Method == http.MethodPost && r.URL.Path == "/v1/generations" && p.held.Load() {
		p.handled <- answer
		<-r.Context().Done() // the caller is killed meanwhile
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// TestSubmitKilledThenRerun: `studio submit FILE` (FILE without a
// request_id) is killed with SIGKILL after the server made the batch but
// before the answer reached it; the same command run again answers that
// batch, and the server has one.
func TestSubmitKilledThenRerun(t *testing.T) {
	t.Parallel()
	api, _, token := serveForClients(t, "0")
	hp := &holdProxy{target: "http://" + api.Addr, handled: make(chan []byte, 1)}
	hp.held.Store(true)
	srv := httptest.NewServer(hp)
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "walk.json")
	if err := os.WriteFile(file, []byte(`{"prompt": "a knight", "sets": [{"collection": "walk", "frames": ["f1", "f2"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	journal := t.TempDir()
	args := []string{"submit", file, "--server", srv.URL, "--journal", journal}
	env := append(os.Environ(), "STUDIO_TOKEN="+token)

	first := exec.Command(studioBinary(t), args...)
	first.Env = env
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	var made struct {
		ID        string `json:"id"`
		RequestID string `json:"request_id"`
	}
	select {
	case answer := <-hp.handled:
		if err := json.Unmarshal(answer, &made); err != nil || made.ID == "" {
			t.Fatalf("the server's answer %q: %v", answer, err)
		}
	case <-time.After(2 * time.Minute):
		first.Process.Kill()
		t.Fatalf("the server never got the request: %s", firstErr.String())
	}
	if err := first.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	if err := first.Wait(); err == nil {
		t.Fatalf("the killed submit exited 0")
	}
	hp.held.Store(false)

	again := exec.Command(studioBinary(t), args...)
	again.Env = env
	var out, errb bytes.Buffer
	again.Stdout, again.Stderr = &out, &errb
	if err := again.Run(); err != nil {
		t.Fatalf("the rerun: %v\n%s", err, errb.String())
	}
	if got := strings.TrimSpace(out.String()); got != made.ID {
		t.Fatalf("the rerun answered batch %q, the killed run's request made %q\n%s", got, made.ID, errb.String())
	}
	if !strings.Contains(errb.String(), "already submitted") || !strings.Contains(errb.String(), made.RequestID) {
		t.Fatalf("the rerun did not say it was a replay of %s: %s", made.RequestID, errb.String())
	}
	c := mustClient(t, "http://"+api.Addr, token, apiclient.Retry{})
	page, err := c.ListBatches(context.Background(), apiclient.ListOptions{})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("%d batches on the server (%v), want 1", len(page.Items), err)
	}

	// --new makes another.
	fresh := exec.Command(studioBinary(t), append(args, "--new")...)
	fresh.Env = env
	out.Reset()
	fresh.Stdout = &out
	if err := fresh.Run(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got == made.ID || got == "" {
		t.Fatalf("--new answered %q", got)
	}
}

// TestEventsWhileWorkerProcessDrains: a client follows a batch's events
// from `studio serve --workers 0` while a separate `studio worker` process
// drains it; the stream is dropped in the middle and resumed with
// Last-Event-ID. Every task's changes arrive once, in order, ending
// succeeded, and the stream ends with done. (Which intermediate states a
// client sees depends on timing: a task may go from queued to succeeded
// between two reads, and is then sent once, succeeded.) On SQLite, and on PostgreSQL
// when STUDIO_TEST_POSTGRES_URL is set.
func TestEventsWhileWorkerProcessDrains(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			var env []string
			var api *proc
			var token string
			workerData := t.TempDir()
			if engine == "postgres" {
				url, _ := pgtest.Schema(t)
				env = []string{"STUDIO_DATABASE_URL=" + url}
				api, _, _ = serveForClients(t, "0", env...)
				token = pgToken(t, url, "alice")
			} else {
				api, workerData, token = serveForClients(t, "0")
			}
			c := mustClient(t, "http://"+api.Addr, token, apiclient.Retry{Base: 10 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			frames := make([]string, 10)
			for i := range frames {
				frames[i] = fmt.Sprintf("f%02d", i)
			}
			created, err := c.CreateGeneration(ctx, apiclient.GenerationRequest{Prompt: "events", Providers: []string{"sketch"},
				Sets: []apiclient.FrameSet{{Collection: "c", Frames: frames}}, Params: json.RawMessage(`{"delay_ms": 200, "width": 16, "height": 16}`)})
			if err != nil {
				t.Fatal(err)
			}
			st, err := c.Events(ctx, created.Record.ID, "")
			if err != nil {
				t.Fatal(err)
			}
			first, err := st.Next()
			if err != nil || first.Name != "batch" || first.Batch.State != apiclient.StateQueued {
				t.Fatalf("first event %+v, %v", first, err)
			}
			// Only now does anything work on the batch: every change comes
			// from the worker process.
			startProcess(t, env, "worker", "--data", workerData, "--concurrency", "2")
			seen := map[string][]string{}
			var lastID string
			taskEvents := 0
			var done *apiclient.Batch
			for done == nil {
				ev, err := st.Next()
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				lastID = ev.ID
				switch ev.Name {
				case "task":
					v := fmt.Sprintf("%s/%d", ev.Task.State, ev.Task.Attempts)
					if vs := seen[ev.Task.ID]; len(vs) > 0 && vs[len(vs)-1] == v {
						t.Fatalf("task %s sent twice as %s", ev.Task.ID, v)
					}
					seen[ev.Task.ID] = append(seen[ev.Task.ID], v)
					taskEvents++
					if taskEvents == 5 {
						// Drop the stream; resume from the last id.
						st.Close()
						if st, err = c.Events(ctx, created.Record.ID, lastID); err != nil {
							t.Fatal(err)
						}
					}
				case "done":
					done = ev.Batch
				}
			}
			st.Close()
			if done.State != apiclient.StateSucceeded || done.Counts.Succeeded != 10 {
				t.Fatalf("done %+v", done)
			}
			if len(seen) != 10 {
				t.Fatalf("%d tasks seen, want 10", len(seen))
			}
			for id, vs := range seen {
				if vs[len(vs)-1] != "succeeded/1" {
					t.Fatalf("task %s: %v", id, vs)
				}
			}
		})
	}
}

// TestCallerCommands: the commands' outputs and exit codes against a
// real server: 0 when every task succeeded, 1 when some failed, 2 for bad
// input (with the server's detail), 3 when the server is unreachable.
func TestCallerCommands(t *testing.T) {
	t.Parallel()
	api, data, _ := serveForClients(t, "2")
	journal := t.TempDir()
	common := []string{"--server", "http://" + api.Addr, "--data", data}
	cli := func(stdin string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runClient(context.Background(), args[0], append(args[1:], common...), strings.NewReader(stdin), &out, &errb)
		return code, out.String(), errb.String()
	}
	ok := `{"prompt": "ok", "sets": [{"collection": "c", "frames": ["a", "b"]}], "params": {"width": 16, "height": 16}}`
	code, out, errs := cli(ok, "submit", "-", "--wait", "--json", "--journal", journal)
	var b apiclient.Batch
	if code != exitOK || json.Unmarshal([]byte(out), &b) != nil || b.State != apiclient.StateSucceeded || b.Counts.Succeeded != 4 {
		t.Fatalf("submit --wait --json: exit %d, %q, %s", code, out, errs)
	}
	if !strings.Contains(errs, "succeeded 4/4 ended (4 succeeded, 0 failed, 0 canceled)") {
		t.Fatalf("no progress lines: %s", errs)
	}
	if code, out, _ := cli("", "status", b.ID); code != exitOK || !strings.HasPrefix(out, b.ID+"  succeeded") {
		t.Fatalf("status: exit %d, %q", code, out)
	}
	dir := filepath.Join(t.TempDir(), "frames")
	if code, _, errs := cli("", "download", b.ID, dir); code != exitOK || !strings.Contains(errs, "saved 4 images") {
		t.Fatalf("download: exit %d, %s", code, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 4 {
		t.Fatalf("%d files downloaded", len(entries))
	}
	// --json prints what was saved, one file per line: its path, task,
	// asset, size and SHA-256, which the file on disk matches; run again,
	// the files are kept.
	jsonDir := filepath.Join(t.TempDir(), "json")
	for round, kept := range []bool{false, true} {
		code, out, errs := cli("", "download", b.ID, jsonDir, "--json")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != exitOK || len(lines) != 4 {
			t.Fatalf("download --json (round %d): exit %d, %q, %s", round, code, out, errs)
		}
		for _, line := range lines {
			var f struct {
				Path       string `json:"path"`
				TaskID     string `json:"task_id"`
				AssetID    string `json:"asset_id"`
				Bytes      int64  `json:"bytes"`
				SHA256     string `json:"sha256"`
				Kept       bool   `json:"kept"`
				Collection string `json:"collection"`
				Frame      string `json:"frame"`
				Generator  string `json:"generator"`
				Candidate  int    `json:"candidate"`
			}
			dec := json.NewDecoder(strings.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&f); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			data, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			sum := sha256.Sum256(data)
			if filepath.Dir(f.Path) != jsonDir || f.TaskID == "" || f.AssetID == "" || f.Bytes != int64(len(data)) ||
				f.SHA256 != hex.EncodeToString(sum[:]) || f.Kept != kept || f.Collection != "c" || f.Generator == "" || f.Candidate != 1 {
				t.Fatalf("round %d: %q does not say the file saved (%d bytes)", round, line, len(data))
			}
		}
	}
	if code, out, _ := cli("", "ls", "--json"); code != exitOK || strings.Count(out, "\n") != 1 || !strings.Contains(out, b.ID) {
		t.Fatalf("ls: exit %d, %q", code, out)
	}

	failing := `{"prompt": "fails", "sets": [{"collection": "c", "frames": ["a"]}], "providers": ["sketch"], "params": {"fail_attempts": 10, "width": 16, "height": 16}}`
	code, out, errs = cli(failing, "submit", "-", "--journal", journal)
	id := strings.TrimSpace(out)
	if code != exitOK || id == "" {
		t.Fatalf("submit: exit %d, %q, %s", code, out, errs)
	}
	if code, _, errs := cli("", "wait", id); code != exitTasksFailed || !strings.Contains(errs, "failed") {
		t.Fatalf("wait on a failing batch: exit %d, %s", code, errs)
	}
	// Why it failed, where the user looks: status sums up the reasons,
	// tasks lists each task with its error, download of it exits 1.
	if code, out, _ := cli("", "status", id); code != exitTasksFailed || !strings.Contains(out, "failed tasks, by reason:\n     1  ") {
		t.Fatalf("status of a failed batch: exit %d, %q", code, out)
	}
	if code, out, errs := cli("", "tasks", id, "--state", "failed"); code != exitOK || strings.Count(out, "\n") != 2 ||
		!strings.Contains(out, "ATTEMPTS") || !strings.Contains(out, "sketch") || !strings.Contains(out, "failed") {
		t.Fatalf("tasks --state failed: exit %d, %q, %s", code, out, errs)
	}
	var task apiclient.Task
	if code, out, _ := cli("", "tasks", id, "--json"); code != exitOK || json.Unmarshal([]byte(out), &task) != nil ||
		task.State != apiclient.StateFailed || task.Error == nil || task.Attempts == 0 {
		t.Fatalf("tasks --json: exit %d, %q", code, out)
	}
	if code, _, _ := cli("", "tasks", id, "--state", "broken"); code != exitUsage {
		t.Fatalf("tasks --state broken: exit %d", code)
	}
	if code, _, errs := cli("", "download", id, filepath.Join(t.TempDir(), "none")); code != exitTasksFailed || !strings.Contains(errs, "studio tasks") {
		t.Fatalf("download of a failed batch: exit %d, %s", code, errs)
	}
	// --server without a scheme; a refused token names where it came from.
	var o, e bytes.Buffer
	if code := runClient(context.Background(), "ls", []string{"--server", api.Addr, "--data", data}, strings.NewReader(""), &o, &e); code != exitOK {
		t.Fatalf("--server HOST:PORT: exit %d, %s", code, e.String())
	}
	e.Reset()
	if code := runClient(context.Background(), "ls", []string{"--server", api.Addr, "--token", "wrong"}, strings.NewReader(""), &o, &e); code != exitUsage ||
		!strings.Contains(e.String(), "The bearer token is not valid. The token came from --token.\n") {
		t.Fatalf("a wrong token: exit %d, %s", code, e.String())
	}

	// A request_id of null is no request id: the journal names the
	// request, so running the same command again answers the same batch.
	nullID := `{"request_id": null, "prompt": "null id", "sets": [{"collection": "c", "frames": ["a"]}], "params": {"width": 16, "height": 16}}`
	var nullIDs []string
	for range 2 {
		code, out, errs := cli(nullID, "submit", "-", "--journal", journal)
		if code != exitOK {
			t.Fatalf("submit with a null request_id: exit %d, %q, %s", code, out, errs)
		}
		nullIDs = append(nullIDs, strings.TrimSpace(out))
	}
	if nullIDs[0] == "" || nullIDs[0] != nullIDs[1] {
		t.Fatalf("a null request_id submitted twice made batches %q", nullIDs)
	}

	bad := `{"prompt": "", "sets": []}`
	if code, _, errs := cli(bad, "submit", "-", "--journal", journal); code != exitUsage || !strings.Contains(errs, "The request body is invalid. (request id ") || !strings.Contains(errs, ")\n  prompt: must not be empty\n") {
		t.Fatalf("bad input: exit %d, %s", code, errs)
	}
	if code, _, _ := cli("not json", "submit", "-", "--journal", journal); code != exitUsage {
		t.Fatalf("not JSON: exit %d", code)
	}
	if code, _, errs := cli("", "status", "no-such-batch"); code != exitUsage || !strings.Contains(errs, "No batch with this id.") {
		t.Fatalf("missing batch: exit %d, %s", code, errs)
	}
	if code, _, _ := cli("", "cancel"); code != exitUsage {
		t.Fatalf("cancel without an id: exit %d", code)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	var out2, errb bytes.Buffer
	if code := runClient(context.Background(), "ls", []string{"--server", "http://" + dead, "--token", "x", "--retries", "2"},
		strings.NewReader(""), &out2, &errb); code != exitUnreachable || !strings.Contains(errb.String(), "cannot reach the server at http://"+dead+" (connection refused; 2 tries)") {
		t.Fatalf("unreachable: exit %d, %s", code, errb.String())
	}
}
