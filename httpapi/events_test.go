package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"

	"studio/httpapi"
	"studio/intent"
	"studio/store"
)

// sseEvent is one Server-Sent Event as the wire carries it.
type sseEvent struct {
	name, id, data string
	comments       []string // comment lines seen before it
}

// sseStream reads events from a live answer, following the
// text/event-stream format of the HTML standard (fields event, id, data;
// lines starting with ':' are comments; a blank line ends an event).
type sseStream struct {
	t    *testing.T
	resp *http.Response
	r    *bufio.Reader
	last sseEvent
}

func openEvents(t *testing.T, srv *httptest.Server, token, batchID, lastID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/batches/"+batchID+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		r.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("events: %d %s", resp.StatusCode, b)
	}
	if ct, cc := resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"); ct != "text/event-stream" || cc != "no-store" {
		t.Fatalf("events: Content-Type %q, Cache-Control %q", ct, cc)
	}
	return &sseStream{t: t, resp: resp, r: bufio.NewReader(resp.Body)}
}

// next reads the next event; io.EOF when the stream ended.
func (s *sseStream) next() (sseEvent, error) {
	var ev sseEvent
	started := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if started {
				s.t.Fatalf("stream ended inside an event: %v", err)
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if started {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			ev.comments = append(ev.comments, strings.TrimSpace(line[1:]))
		default:
			started = true
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				ev.name = value
			case "id":
				ev.id = value
			case "data":
				ev.data += value
			default:
				s.t.Fatalf("unknown field in %q", line)
			}
		}
	}
}

// comment reads the next comment line (a heartbeat), failing if an event
// comes first.
func (s *sseStream) comment() string {
	s.t.Helper()
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("waiting for a comment: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
		case strings.HasPrefix(line, ":"):
			return strings.TrimSpace(line[1:])
		default:
			s.t.Fatalf("an event came before a comment: %q", line)
		}
	}
}

// must reads the next event and checks its name.
func (s *sseStream) must(name string) sseEvent {
	s.t.Helper()
	ev, err := s.next()
	if err != nil {
		s.t.Fatalf("waiting for %s: %v", name, err)
	}
	if ev.name != name || ev.id == "" {
		s.t.Fatalf("got event %q (id %q) %s, want %s", ev.name, ev.id, ev.data, name)
	}
	return ev
}

func eventData[T any](t *testing.T, ev sseEvent) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(ev.data), &v, json.RejectUnknownMembers(true)); err != nil {
		t.Fatalf("event %s data %q: %v", ev.name, ev.data, err)
	}
	return v
}

func eventsHarness(t *testing.T) (*harness, *httptest.Server) {
	h := newHarness(t, options{events: httpapi.Events{Poll: 5 * time.Millisecond, Heartbeat: 100 * time.Millisecond}})
	srv := httptest.NewServer(h.h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.server.EndStreams)
	return h, srv
}

func claimAll(t *testing.T, s store.Store, n int) []store.ClaimedTask {
	t.Helper()
	cs, err := s.ClaimTasks(context.Background(), store.ClaimParams{Owner: "w", Limit: n, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != n {
		t.Fatalf("claimed %d, want %d", len(cs), n)
	}
	return cs
}

func TestBatchEventsFollowChanges(t *testing.T) {
	h, srv := eventsHarness(t)
	b := h.create("alice", "ev-1", 4, 1)
	st := openEvents(t, srv, h.tokens["alice"], b.ID, "")

	first := st.must("batch")
	got := h.do(req{method: http.MethodGet, path: "/v1/batches/" + b.ID, actor: "alice"})
	if want := strings.TrimSpace(got.Body.String()); first.data != want {
		t.Fatalf("first event data\n%s\nwant GET's\n%s", first.data, want)
	}
	// Nothing happens: a heartbeat comes, then the claim's events.
	if c := st.comment(); c != "ping" {
		t.Fatalf("a quiet stream sent the comment %q, want a heartbeat", c)
	}
	cs := claimAll(t, h.store, 2)
	running := map[string]bool{}
	ev := st.must("task")
	for {
		tk := eventData[intent.Task](t, ev)
		if tk.State != intent.StateRunning || tk.Attempts != 1 || tk.BatchID != b.ID {
			t.Fatalf("task event %+v", tk)
		}
		running[tk.ID] = true
		if len(running) == 2 {
			break
		}
		ev = st.must("task")
	}
	if bb := eventData[intent.Batch](t, st.must("batch")); bb.Counts.Running != 2 || bb.State != intent.StateRunning {
		t.Fatalf("batch after the claim: %+v", bb)
	}
	if !running[cs[0].ID] || !running[cs[1].ID] {
		t.Fatalf("task events for %v, claimed %s and %s", running, cs[0].ID, cs[1].ID)
	}

	if _, err := h.store.CompleteLeases(context.Background(), []store.Completion{{Lease: cs[0].Lease,
		Asset: intent.Asset{ID: "0192aaaa-0000-7000-8000-000000000001", SHA256: strings.Repeat("a", 64), ContentType: "image/png", Size: 1, Width: 1, Height: 1}}}); err != nil {
		t.Fatal(err)
	}
	tk := eventData[intent.Task](t, st.must("task"))
	if tk.ID != cs[0].ID || tk.State != intent.StateSucceeded || tk.AssetID == nil {
		t.Fatalf("completion event %+v", tk)
	}
	if bb := eventData[intent.Batch](t, st.must("batch")); bb.Counts.Succeeded != 1 || bb.Counts.Running != 1 {
		t.Fatalf("batch after the completion: %+v", bb.Counts)
	}

	if _, err := h.store.CancelBatch(context.Background(), "alice", b.ID); err != nil {
		t.Fatal(err)
	}
	// The running task stops at its next step.
	if _, err := h.store.FailLease(context.Background(), store.Failure{Lease: cs[1].Lease, Error: "stopped"}); err != nil {
		t.Fatal(err)
	}
	canceled := map[string]bool{}
	for {
		ev, err := st.next()
		if err != nil {
			t.Fatalf("before done: %v", err)
		}
		if ev.name == "done" {
			st.last = ev
			break
		}
		if ev.name != "task" {
			continue
		}
		tk := eventData[intent.Task](t, ev)
		if tk.State != intent.StateCanceled || canceled[tk.ID] || tk.ID == cs[0].ID {
			t.Fatalf("event after the cancel %+v", tk)
		}
		canceled[tk.ID] = true
	}
	if len(canceled) != 3 {
		t.Fatalf("%d canceled task events, want 3", len(canceled))
	}
	done := eventData[intent.Batch](t, st.last)
	if done.State != intent.StateCanceled || done.Counts.Succeeded != 1 || done.Counts.Canceled != 3 {
		t.Fatalf("done %+v", done)
	}
	if _, err := st.next(); err != io.EOF {
		t.Fatalf("after done: %v, want the end of the stream", err)
	}
}

// TestBatchEventsResume drops the stream in the middle of a read's task
// events and after a batch event, changes the batch while it is away, and
// reconnects with Last-Event-ID: every change arrives exactly once, a task
// that changed twice meanwhile as it stands.
func TestBatchEventsResume(t *testing.T) {
	h, srv := eventsHarness(t)
	b := h.create("alice", "ev-resume", 6, 1)
	tok := h.tokens["alice"]
	seen := map[string][]string{} // task -> versions, in order
	note := func(ev sseEvent) {
		tk := eventData[intent.Task](t, ev)
		v := fmt.Sprintf("%s/%d", tk.State, tk.Attempts)
		if vs := seen[tk.ID]; len(vs) > 0 && vs[len(vs)-1] == v {
			t.Fatalf("task %s sent twice as %s", tk.ID, v)
		}
		seen[tk.ID] = append(seen[tk.ID], v)
	}
	// until reads events, noting tasks, up to a batch or done event whose
	// batch satisfies ok; it answers that event.
	until := func(st *sseStream, ok func(name string, b intent.Batch) bool) sseEvent {
		t.Helper()
		for {
			ev, err := st.next()
			if err != nil {
				t.Fatalf("stream: %v (seen %v)", err, seen)
			}
			switch ev.name {
			case "task":
				note(ev)
			case "batch", "done":
				if ok(ev.name, eventData[intent.Batch](t, ev)) {
					return ev
				}
			}
		}
	}

	st := openEvents(t, srv, tok, b.ID, "")
	last := st.must("batch").id
	cs := claimAll(t, h.store, 6)
	for i := 0; i < 3; i++ {
		ev := st.must("task")
		note(ev)
		last = ev.id
	}
	st.resp.Body.Close()

	// Away: two tasks end, one of them (cs[5], last in id order) maybe
	// before its running state was sent.
	for _, c := range []store.ClaimedTask{cs[0], cs[5]} {
		if _, err := h.store.FailLease(context.Background(), store.Failure{Lease: c.Lease, Error: "boom", Permanent: true}); err != nil {
			t.Fatal(err)
		}
	}
	st = openEvents(t, srv, tok, b.ID, last)
	if ev := st.must("batch"); ev.id != last {
		t.Fatalf("a resumed stream's first event has id %q, want %q (nothing new sent yet)", ev.id, last)
	}
	last = until(st, func(_ string, b intent.Batch) bool { return b.Counts.Failed == 2 }).id
	st.resp.Body.Close()
	for id, vs := range seen {
		want := "running/1"
		if id == cs[0].ID || id == cs[5].ID {
			want = "failed/1"
		}
		if vs[len(vs)-1] != want {
			t.Fatalf("task %s: sent %v, want it to end %s", id, vs, want)
		}
	}
	if len(seen) != 6 {
		t.Fatalf("%d tasks sent, want 6: %v", len(seen), seen)
	}

	// Away again: the rest succeed.
	for i, c := range cs[1:5] {
		a := intent.Asset{ID: fmt.Sprintf("0192aaaa-0000-7000-8000-%012d", i), SHA256: strings.Repeat("b", 64), ContentType: "image/png", Size: 1, Width: 1, Height: 1}
		if _, err := h.store.CompleteLeases(context.Background(), []store.Completion{{Lease: c.Lease, Asset: a}}); err != nil {
			t.Fatal(err)
		}
	}
	st = openEvents(t, srv, tok, b.ID, last)
	done := eventData[intent.Batch](t, until(st, func(name string, _ intent.Batch) bool { return name == "done" }))
	if done.State != intent.StateFailed || done.Counts.Succeeded != 4 || done.Counts.Failed != 2 {
		t.Fatalf("done %+v", done)
	}
	if _, err := st.next(); err != io.EOF {
		t.Fatalf("after done: %v, want the end", err)
	}
	final, err := h.store.ListTasks(context.Background(), b.ID, store.ListParams{Actor: "alice", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range final {
		vs := seen[tk.ID]
		if want := fmt.Sprintf("%s/%d", tk.State, tk.Attempts); vs[len(vs)-1] != want {
			t.Fatalf("task %s: sent %v, ends %s", tk.ID, vs, want)
		}
	}
}

func TestBatchEventsRules(t *testing.T) {
	h, srv := eventsHarness(t)
	b := h.create("alice", "ev-rules", 1, 1)
	path := "/v1/batches/" + b.ID + "/events"
	w := h.do(req{method: http.MethodGet, path: path})
	wantProblem(t, w, http.StatusUnauthorized)
	wantProblem(t, h.do(req{method: http.MethodGet, path: path, actor: "bob"}), http.StatusNotFound)
	wantProblem(t, h.do(req{method: http.MethodGet, path: "/v1/batches/nope/events", actor: "alice"}), http.StatusNotFound)
	for _, bad := range []string{"x", "-1", "5.3.t", "1.2.", "1.2"} {
		p := wantProblem(t, h.do(req{method: http.MethodGet, path: path, actor: "alice", header: http.Header{"Last-Event-ID": {bad}}}), http.StatusBadRequest)
		if !p.hasField("Last-Event-ID") {
			t.Fatalf("Last-Event-ID %q: problem %+v", bad, p)
		}
	}
	// An ended batch: its state, then done at once.
	if _, err := h.store.CancelBatch(context.Background(), "alice", b.ID); err != nil {
		t.Fatal(err)
	}
	st := openEvents(t, srv, h.tokens["alice"], b.ID, "")
	first := st.must("batch")
	if done := eventData[intent.Batch](t, st.must("done")); done.State != intent.StateCanceled || done.ID != b.ID {
		t.Fatalf("done %+v", done)
	} else if eventData[intent.Batch](t, first).State != intent.StateCanceled {
		t.Fatalf("first event %s", first.data)
	}
	if _, err := st.next(); err != io.EOF {
		t.Fatalf("after done: %v, want the end", err)
	}
}

// TestEndStreams: a server shutting down ends its open streams, so that
// http.Server.Shutdown does not wait for them.
func TestEndStreams(t *testing.T) {
	h, srv := eventsHarness(t)
	b := h.create("alice", "ev-end", 1, 1)
	st := openEvents(t, srv, h.tokens["alice"], b.ID, "")
	st.must("batch")
	h.server.EndStreams()
	for {
		_, err := st.next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
	}
}

// TestBatchEventsWakeInProcess: with a poll of an hour, changes made
// through the server's own store (as an embedded worker makes them) still
// reach the stream: the store wakes it. Without the wake-up the stream
// would wait for the poll, and the body's closing after 20s fails the
// test.
func TestBatchEventsWakeInProcess(t *testing.T) {
	h := newHarness(t, options{events: httpapi.Events{Poll: time.Hour, Heartbeat: time.Hour}})
	srv := httptest.NewServer(h.h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.server.EndStreams)
	b := h.create("alice", "wake-1", 2, 1)
	st := openEvents(t, srv, h.tokens["alice"], b.ID, "")
	stop := time.AfterFunc(20*time.Second, func() { st.resp.Body.Close() })
	defer stop.Stop()
	st.must("batch")

	cs := claimAll(t, h.store, 2)
	seen := map[string]bool{}
	for len(seen) < 2 {
		tk := eventData[intent.Task](t, st.must("task"))
		if tk.State != intent.StateRunning {
			t.Fatalf("task event after the claim: %+v", tk)
		}
		seen[tk.ID] = true
	}
	if bb := eventData[intent.Batch](t, st.must("batch")); bb.Counts.Running != 2 {
		t.Fatalf("batch after the claim: %+v", bb.Counts)
	}
	for i, c := range cs {
		if _, err := h.store.CompleteLeases(context.Background(), []store.Completion{{Lease: c.Lease,
			Asset: intent.Asset{ID: fmt.Sprintf("0192aaaa-0000-7000-8000-00000000000%d", i+1), SHA256: strings.Repeat(fmt.Sprint(i+1), 64),
				ContentType: "image/png", Size: 1, Width: 1, Height: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		ev, err := st.next()
		if err != nil {
			t.Fatalf("before done: %v", err)
		}
		if ev.name == "done" {
			if bb := eventData[intent.Batch](t, ev); bb.Counts.Succeeded != 2 || bb.State != intent.StateSucceeded {
				t.Fatalf("done %+v", bb)
			}
			return
		}
	}
}

// TestBatchEventsGap: after a read woken by an in-process change, the
// stream does not read again for Events.Gap, however the batch changes
// meanwhile (here a gap and a poll of an hour: the second change is not
// sent), and the first change was sent at once.
func TestBatchEventsGap(t *testing.T) {
	h := newHarness(t, options{events: httpapi.Events{Poll: time.Hour, Heartbeat: time.Hour, Gap: time.Hour}})
	srv := httptest.NewServer(h.h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.server.EndStreams)
	b := h.create("alice", "gap-1", 2, 1)
	st := openEvents(t, srv, h.tokens["alice"], b.ID, "")
	stop := time.AfterFunc(20*time.Second, func() { st.resp.Body.Close() })
	defer stop.Stop()
	st.must("batch")

	cs := claimAll(t, h.store, 2)
	for range 2 {
		if tk := eventData[intent.Task](t, st.must("task")); tk.State != intent.StateRunning {
			t.Fatalf("task event after the claim: %+v", tk)
		}
	}
	st.must("batch")
	if _, err := h.store.CompleteLeases(context.Background(), []store.Completion{{Lease: cs[0].Lease,
		Asset: intent.Asset{ID: "0192aaaa-0000-7000-8000-000000000001", SHA256: strings.Repeat("a", 64),
			ContentType: "image/png", Size: 1, Width: 1, Height: 1}}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan sseEvent, 1)
	go func() {
		if ev, err := st.next(); err == nil {
			got <- ev
		}
	}()
	select {
	case ev := <-got:
		t.Fatalf("an event within the gap: %s %s", ev.name, ev.data)
	case <-time.After(500 * time.Millisecond):
	}
}
