package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"studio/client"
)

// quick is a retry policy for tests: many quick tries.
var quick = client.Retry{Attempts: 8, Base: time.Millisecond, Max: 20 * time.Millisecond, AttemptTimeout: 2 * time.Second}

func newClient(t *testing.T, base, token string, r client.Retry) *client.Client {
	t.Helper()
	c, err := client.New(base, client.WithToken(token), client.WithRetry(r))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const batchJSON = `{"id":"b1","request_id":"%s","state":"queued","prompt":"p","task_count":1,
	"counts":{"queued":1,"running":0,"succeeded":0,"failed":0,"canceled":0},
	"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`

// TestRetriesSendOneIDAndBody: a 503, a reset connection and a try that
// times out, then an answer: four tries of one logical call, each with
// the same request id (a UUIDv7 the client made) and the same bytes.
func TestRetriesSendOneIDAndBody(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		n := len(bodies)
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("try %d: Authorization %q", n, r.Header.Get("Authorization"))
		}
		switch n {
		case 1:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"busy"}`)
		case 2:
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.(*net.TCPConn).SetLinger(0) // a reset, not a clean close
			conn.Close()
		case 3:
			<-r.Context().Done() // no answer: the try times out, and its connection closes
		default:
			var in struct {
				RequestID string `json:"request_id"`
			}
			json.Unmarshal(b, &in)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, batchJSON, in.RequestID)
		}
	}))
	defer srv.Close()
	r := quick
	r.AttemptTimeout = 500 * time.Millisecond
	c := newClient(t, srv.URL, "tok", r)
	res, err := c.CreateGeneration(context.Background(), client.GenerationRequest{Prompt: "p",
		Sets: []client.FrameSet{{Collection: "c", Frames: []string{"f"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// Four at least: a slow machine may time out a try more.
	if len(bodies) < 4 {
		t.Fatalf("%d tries, want 4", len(bodies))
	}
	for i, b := range bodies {
		if b != bodies[0] {
			t.Fatalf("try %d sent %s, try 1 sent %s", i+1, b, bodies[0])
		}
	}
	id, err := uuid.Parse(res.RequestID)
	if err != nil || id.Version() != 7 {
		t.Fatalf("request id %q is not a UUIDv7 (%v)", res.RequestID, err)
	}
	if !strings.Contains(bodies[0], `"request_id":"`+res.RequestID+`"`) || res.Record.RequestID != res.RequestID || res.Replayed {
		t.Fatalf("answer %+v for body %s", res, bodies[0])
	}
}

// TestRetryAfter: a 429 is retried after its Retry-After; one that asks
// longer than MaxRetryAfter ends the call with the answer.
func TestRetryAfter(t *testing.T) {
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tries.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"slow down"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, batchJSON, "x")
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, "tok", quick)
	start := time.Now()
	if _, err := c.GetBatch(context.Background(), "b1"); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 900*time.Millisecond || tries.Load() != 2 {
		t.Fatalf("%d tries in %v: the Retry-After of 1s was not honoured", tries.Load(), waited)
	}

	tries.Store(0)
	r := quick
	r.MaxRetryAfter = 100 * time.Millisecond
	c = newClient(t, srv.URL, "tok", r)
	_, err := c.GetBatch(context.Background(), "b1")
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 429 || e.RetryAfter != time.Second || e.Detail != "slow down" || tries.Load() != 1 {
		t.Fatalf("err %v (%+v), %d tries", err, e, tries.Load())
	}
}

// TestNoRetryOn4xx: a 4xx other than 429 is the caller's to fix: one try,
// and the error carries the problem document.
func TestNoRetryOn4xx(t *testing.T) {
	for _, status := range []int{400, 401, 404, 409, 413, 415, 422} {
		var tries atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tries.Add(1)
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d,"detail":"no","errors":[{"field":"prompt","message":"must not be empty"}]}`,
				http.StatusText(status), status)
		}))
		c := newClient(t, srv.URL, "tok", quick)
		_, err := c.CreateGeneration(context.Background(), client.GenerationRequest{RequestID: "r"})
		srv.Close()
		var e *client.Error
		if !errors.As(err, &e) || e.Status != status || e.Detail != "no" || len(e.Errors) != 1 || e.Errors[0].Field != "prompt" {
			t.Fatalf("%d: err %v", status, err)
		}
		if tries.Load() != 1 || client.StatusOf(err) != status || errors.Is(err, client.ErrUnreachable) {
			t.Fatalf("%d: %d tries", status, tries.Load())
		}
		if !strings.Contains(err.Error(), "prompt: must not be empty") {
			t.Fatalf("%d: message %q names no field", status, err)
		}
	}
}

// TestUnreachable: nothing listens: every try fails, and the error says
// so (ErrUnreachable), after the policy's tries.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, "http://"+addr, "tok", client.Retry{Attempts: 3, Base: time.Millisecond, Max: 2 * time.Millisecond})
	_, err = c.GetBatch(context.Background(), "b1")
	var ue *client.UnreachableError
	if !errors.Is(err, client.ErrUnreachable) || !errors.As(err, &ue) || ue.Tries != 3 || ue.Kind != "refused" ||
		err.Error() != "get batch b1: cannot reach the server at http://"+addr+" (connection refused; 3 tries)" {
		t.Fatalf("err %v", err)
	}
	// The last try's error stays in the chain, for programs.
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Fatalf("no *net.OpError in %v", err)
	}
}

// TestContextEndsRetries: the caller's context bounds the whole call.
func TestContextEndsRetries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, "tok", client.Retry{Attempts: 1000, Base: 5 * time.Millisecond, Max: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.CancelBatch(ctx, "b1")
	if !errors.Is(err, context.DeadlineExceeded) && client.StatusOf(err) != http.StatusBadGateway {
		t.Fatalf("err %v", err)
	}
	if ctx.Err() == nil {
		t.Fatalf("the call returned before its context ended: %v", err)
	}
}

func TestNewRefusesBadAddresses(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:7070", "ftp://x", "http://"} {
		if _, err := client.New(bad); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

// TestAgainstTheRealAPI: every typed call against the real HTTP API.
func TestAgainstTheRealAPI(t *testing.T) {
	s := newStack(t, true)
	c, err := client.New(s.URL, client.WithToken(s.Token), client.WithRetry(quick),
		client.WithHTTPClient(&http.Client{Timeout: time.Minute}), client.WithUserAgent("client-test"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if m, err := c.Metrics(ctx); err != nil || !strings.Contains(string(m), "studio metrics") {
		t.Fatalf("metrics: %q, %v", m, err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if doc, err := c.OpenAPI(ctx); err != nil || !strings.Contains(string(doc), "/v1/batches/{id}/events") {
		t.Fatalf("openapi: %v", err)
	}
	req := client.GenerationRequest{RequestID: "real-1", Prompt: "a knight", Candidates: 2,
		Sets: []client.FrameSet{{Collection: "walk", Frames: []string{"f1", "f2"}}}, Params: json.RawMessage(`{"width":32,"height":32}`)}
	first, err := c.CreateGeneration(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed || first.Record.TaskCount != 8 {
		t.Fatalf("created %+v", first)
	}
	again, err := c.CreateGeneration(ctx, req)
	if err != nil || !again.Replayed || again.Record.ID != first.Record.ID {
		t.Fatalf("replay %+v, %v", again, err)
	}
	req.Candidates = 3
	if _, err := c.CreateGeneration(ctx, req); client.StatusOf(err) != http.StatusConflict {
		t.Fatalf("conflict: %v", err)
	}
	b, err := c.WaitBatch(ctx, first.Record.ID, client.WaitOptions{})
	if err != nil || b.State != client.StateSucceeded || b.Counts.Succeeded != 8 {
		t.Fatalf("wait: %+v, %v", b, err)
	}
	page, err := c.ListBatches(ctx, client.ListOptions{Limit: 1})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != first.Record.ID || page.NextCursor != "" {
		t.Fatalf("list batches: %+v, %v", page, err)
	}
	tasks, err := c.AllTasks(ctx, b.ID, client.StateSucceeded)
	if err != nil || len(tasks) != 8 {
		t.Fatalf("tasks: %d, %v", len(tasks), err)
	}
	tp, err := c.ListTasks(ctx, b.ID, client.TaskListOptions{ListOptions: client.ListOptions{Limit: 3}})
	if err != nil || len(tp.Items) != 3 || tp.NextCursor == "" {
		t.Fatalf("tasks page: %+v, %v", tp, err)
	}
	asset, err := c.GetAsset(ctx, *tasks[0].AssetID)
	if err != nil {
		t.Fatal(err)
	}
	data, ct, err := c.AssetContent(ctx, asset.ID)
	sum := sha256.Sum256(data)
	if err != nil || ct != "image/png" || hex.EncodeToString(sum[:]) != asset.SHA256 {
		t.Fatalf("content: %s, %v", ct, err)
	}
	up, err := c.Upload(ctx, "image/png", data, "")
	if err != nil || up.Replayed {
		t.Fatalf("upload: %+v, %v", up, err)
	}
	if up2, err := c.Upload(ctx, "image/png", data, up.RequestID); err != nil || !up2.Replayed || up2.Record.ID != up.Record.ID {
		t.Fatalf("upload replay: %+v, %v", up2, err)
	}
	if _, err := c.Upload(ctx, "text/plain", []byte("x"), ""); client.StatusOf(err) != http.StatusUnsupportedMediaType {
		t.Fatalf("upload of text: %v", err)
	}
	canceled, err := c.CancelBatch(ctx, b.ID)
	if err != nil || canceled.State != client.StateSucceeded {
		t.Fatalf("cancel of an ended batch: %+v, %v", canceled, err)
	}
	if _, err := c.GetBatch(ctx, "nope"); client.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("missing batch: %v", err)
	}
	pub, err := c.CreatePublication(ctx, client.PublicationRequest{BatchID: b.ID, AssetIDs: []string{asset.ID}, Channel: "gallery"})
	if err != nil || pub.Replayed || pub.Record.ItemCount != 1 {
		t.Fatalf("publish: %+v, %v", pub, err)
	}
	if got, err := c.GetPublication(ctx, pub.Record.ID); err != nil || got.BatchID != b.ID {
		t.Fatalf("get publication: %+v, %v", got, err)
	}
	if pubs, err := c.ListPublications(ctx, client.ListOptions{}); err != nil || len(pubs.Items) != 1 || pubs.Items[0].ID != pub.Record.ID {
		t.Fatalf("list publications: %+v, %v", pubs, err)
	}
	if _, err := c.CreatePublication(ctx, client.PublicationRequest{BatchID: b.ID, AssetIDs: []string{up.Record.ID}}); client.StatusOf(err) != http.StatusUnprocessableEntity {
		t.Fatalf("publish an upload of another batch: %v", err)
	}
	bad := newClient(t, s.URL, "wrong", quick)
	if _, err := bad.GetBatch(ctx, b.ID); client.StatusOf(err) != http.StatusUnauthorized {
		t.Fatalf("bad token: %v", err)
	}
}

// TestWaitBatchEvents: WaitBatch reports every task's end from the event
// stream, once each.
func TestWaitBatchEvents(t *testing.T) {
	s := newStack(t, true)
	c := newClient(t, s.URL, s.Token, quick)
	ctx := context.Background()
	created, err := c.CreateGeneration(ctx, client.GenerationRequest{Prompt: "p", Providers: []string{"sketch"},
		Sets: []client.FrameSet{{Collection: "c", Frames: []string{"a", "b", "c", "d", "e", "f"}}}, Params: json.RawMessage(`{"delay_ms":20,"width":16,"height":16}`)})
	if err != nil {
		t.Fatal(err)
	}
	ended := map[string]int{}
	polled := false
	b, err := c.WaitBatch(ctx, created.Record.ID, client.WaitOptions{OnProgress: func(p client.Progress) {
		polled = polled || p.Polling
		if p.Task != nil && client.Ended(p.Task.State) {
			ended[p.Task.ID]++
		}
	}})
	if err != nil || b.State != client.StateSucceeded {
		t.Fatalf("wait: %+v, %v", b, err)
	}
	if polled || len(ended) != 6 {
		t.Fatalf("polled %v, ended tasks reported %v", polled, ended)
	}
	for id, n := range ended {
		if n != 1 {
			t.Fatalf("task %s reported ended %d times", id, n)
		}
	}
}

// proxy puts a handler in front of the stack's API.
func proxy(t *testing.T, s *stack, wrap func(next http.Handler) http.Handler) string {
	u, _ := url.Parse(s.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	srv := httptest.NewServer(wrap(rp))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestWaitBatchPollsWithoutEvents: a server without the events route
// (404 on it) is followed by polling.
func TestWaitBatchPollsWithoutEvents(t *testing.T) {
	s := newStack(t, true)
	front := proxy(t, s, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/events") {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `{"type":"about:blank","title":"Not Found","status":404,"detail":"No route serves it."}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	c := newClient(t, front, s.Token, quick)
	ctx := context.Background()
	created, err := c.CreateGeneration(ctx, client.GenerationRequest{Prompt: "p",
		Sets: []client.FrameSet{{Collection: "c", Frames: []string{"a"}}}, Params: json.RawMessage(`{"width":16,"height":16}`)})
	if err != nil {
		t.Fatal(err)
	}
	polled := false
	b, err := c.WaitBatch(ctx, created.Record.ID, client.WaitOptions{PollInterval: 10 * time.Millisecond,
		OnProgress: func(p client.Progress) { polled = polled || p.Polling }})
	if err != nil || b.State != client.StateSucceeded || !polled {
		t.Fatalf("wait: %+v, %v, polled %v", b, err, polled)
	}
	if _, err := c.WaitBatch(ctx, "nope", client.WaitOptions{}); client.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("wait for a missing batch: %v", err)
	}
}

// cutWriter ends a stream after a number of events went through.
type cutWriter struct {
	http.ResponseWriter
	left int
}

func (w *cutWriter) Write(b []byte) (int, error) {
	if w.left <= 0 {
		return 0, errors.New("cut")
	}
	w.left -= strings.Count(string(b), "\n\n")
	return w.ResponseWriter.Write(b)
}

func (w *cutWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// TestWaitBatchReconnects: every event stream is cut after a few events;
// WaitBatch reconnects with Last-Event-ID each time, and each task's end
// is reported exactly once.
func TestWaitBatchReconnects(t *testing.T) {
	s := newStack(t, true)
	var streams atomic.Int32
	front := proxy(t, s, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/events") {
				streams.Add(1)
				// The stream breaks once the events allowed went through.
				cw := &cutWriter{ResponseWriter: w, left: 3}
				next.ServeHTTP(cw, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	c := newClient(t, front, s.Token, quick)
	ctx := context.Background()
	frames := make([]string, 12)
	for i := range frames {
		frames[i] = fmt.Sprintf("f%02d", i)
	}
	created, err := c.CreateGeneration(ctx, client.GenerationRequest{Prompt: "p", Providers: []string{"sketch"},
		Sets: []client.FrameSet{{Collection: "c", Frames: frames}}, Params: json.RawMessage(`{"delay_ms":10,"width":16,"height":16}`)})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	b, err := c.WaitBatch(ctx, created.Record.ID, client.WaitOptions{MaxStreamFailures: 1000, OnProgress: func(p client.Progress) {
		if p.Polling {
			t.Errorf("fell back to polling")
		}
		if p.Task != nil {
			v := fmt.Sprintf("%s/%d", p.Task.State, p.Task.Attempts)
			if vs := seen[p.Task.ID]; len(vs) > 0 && vs[len(vs)-1] == v {
				t.Errorf("task %s reported twice as %s", p.Task.ID, v)
			}
			seen[p.Task.ID] = append(seen[p.Task.ID], v)
		}
	}})
	if err != nil || b.State != client.StateSucceeded {
		t.Fatalf("wait: %+v, %v", b, err)
	}
	if streams.Load() < 3 {
		t.Fatalf("only %d streams: the cuts did not happen", streams.Load())
	}
	if len(seen) != 12 {
		t.Fatalf("%d tasks reported, want 12", len(seen))
	}
	for id, vs := range seen {
		if vs[len(vs)-1] != "succeeded/1" {
			t.Fatalf("task %s: reported %v", id, vs)
		}
	}
}

// TestDownload saves a batch's images, checked, and a second run keeps
// them.
func TestDownload(t *testing.T) {
	s := newStack(t, true)
	c := newClient(t, s.URL, s.Token, quick)
	ctx := context.Background()
	created, err := c.CreateGeneration(ctx, client.GenerationRequest{Prompt: "p",
		Sets: []client.FrameSet{{Collection: "../walk cycle", Frames: []string{"f/1", "f2"}}}, Params: json.RawMessage(`{"width":16,"height":16}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitBatch(ctx, created.Record.ID, client.WaitOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	files, err := c.Download(ctx, created.Record.ID, dir, client.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 {
		t.Fatalf("%d files, want 4", len(files))
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Fatalf("%d entries in the directory, want 4", len(entries))
	}
	for _, f := range files {
		if filepath.Dir(f.Path) != dir || f.Skipped || !strings.HasSuffix(f.Path, ".png") {
			t.Fatalf("file %+v", f)
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.GetAsset(ctx, *f.Task.AssetID)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != a.SHA256 {
			t.Fatalf("%s: bytes differ from the asset", f.Path)
		}
	}
	again, err := c.Download(ctx, created.Record.ID, dir, client.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range again {
		if !f.Skipped {
			t.Fatalf("second download rewrote %s", f.Path)
		}
	}
}

// TestIDsEscapedOnce: an id with "/", "%" or a space reaches the server
// as one path segment escaped once.
func TestIDsEscapedOnce(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.EscapedPath())
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"title":"Not Found","status":404,"detail":"Not found."}`)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL+"/base", "tok", client.Retry{Attempts: 1})
	if _, err := c.GetBatch(context.Background(), "a/b%c d"); err == nil {
		t.Fatal("a 404 answered no error")
	}
	if p, _ := got.Load().(string); p != "/base/v1/batches/a%2Fb%25c%20d" {
		t.Fatalf("the server saw %q", p)
	}
}
