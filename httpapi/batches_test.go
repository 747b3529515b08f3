package httpapi_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"studio/intent"
)

// batchList and taskList are the list envelopes as a client reads them.
type batchList struct {
	Items      []intent.Batch `json:"items"`
	NextCursor *string        `json:"next_cursor"`
}

type taskList struct {
	Items      []intent.Task `json:"items"`
	NextCursor *string       `json:"next_cursor"`
}

func TestGetBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	b := h.create("alice", "req-1", 2, 2)
	w := h.do(req{method: "GET", path: "/v1/batches/" + b.ID, actor: "alice"})
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %q: %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	if got := decode[intent.Batch](t, w); got.ID != b.ID || got.TaskCount != 4 || got.RequestID != "req-1" {
		t.Errorf("got %+v", got)
	}
}

// TestOtherActorIsNotFound: every read or change of another actor's record
// answers exactly what a record that does not exist answers.
func TestOtherActorIsNotFound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	b := h.create("alice", "req-1", 1, 1)
	a := h.addAsset("alice", []byte("png bytes"))
	missing := "0192f0c1-0000-7000-8000-000000000000"
	tests := []struct{ name, method, path, missing, detail string }{
		{"batch", "GET", "/v1/batches/" + b.ID, "/v1/batches/" + missing, "No batch with this id."},
		{"tasks", "GET", "/v1/batches/" + b.ID + "/tasks", "/v1/batches/" + missing + "/tasks", "No batch with this id."},
		{"cancel", "POST", "/v1/batches/" + b.ID + "/cancel", "/v1/batches/" + missing + "/cancel", "No batch with this id."},
		{"asset", "GET", "/v1/assets/" + a.ID, "/v1/assets/" + missing, "No asset with this id."},
		{"asset content", "GET", "/v1/assets/" + a.ID + "/content", "/v1/assets/" + missing + "/content", "No asset with this id."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			theirs := h.do(req{method: tc.method, path: tc.path, actor: "bob"})
			none := h.do(req{method: tc.method, path: tc.missing, actor: "bob"})
			if p := wantProblem(t, theirs, http.StatusNotFound); p.Detail != tc.detail {
				t.Errorf("detail %q, want %q", p.Detail, tc.detail)
			}
			wantProblem(t, none, http.StatusNotFound)
			if theirs.Body.String() != none.Body.String() {
				t.Errorf("another actor's record answers %s, a missing one %s", theirs.Body, none.Body)
			}
			if mine := h.do(req{method: tc.method, path: tc.path, actor: "alice"}); mine.Code != http.StatusOK {
				t.Errorf("the owner gets %d: %s", mine.Code, mine.Body)
			}
		})
	}
	// Bob's list does not show alice's batch.
	if l := decode[batchList](t, h.do(req{method: "GET", path: "/v1/batches", actor: "bob"})); len(l.Items) != 0 || l.NextCursor != nil {
		t.Errorf("bob lists %+v", l)
	}
}

// TestListTasksPages pages through 250 tasks 100 at a time and reaches
// every one exactly once, in plan order.
func TestListTasksPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	b := h.create("alice", "big", 50, 5) // 50 frames x 1 provider x 5 candidates
	if b.TaskCount != 250 {
		t.Fatalf("task_count %d", b.TaskCount)
	}
	seen := map[string]bool{}
	var ids []string
	path := "/v1/batches/" + b.ID + "/tasks?limit=100"
	var sizes []int
	for page := 0; ; page++ {
		if page > 3 {
			t.Fatal("more pages than 250 tasks need")
		}
		w := h.do(req{method: "GET", path: path, actor: "alice"})
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("page %d: %d %s", page, w.Code, w.Body)
		}
		l := decode[taskList](t, w)
		sizes = append(sizes, len(l.Items))
		for _, task := range l.Items {
			if seen[task.ID] {
				t.Fatalf("task %s twice", task.ID)
			}
			seen[task.ID] = true
			ids = append(ids, task.ID)
			if task.BatchID != b.ID || task.State != intent.StateQueued || task.Candidate < 1 || task.Candidate > 5 || task.Generator != "sketch" || task.AssetID != nil || task.Error != nil {
				t.Fatalf("task %+v", task)
			}
		}
		if l.NextCursor == nil {
			break
		}
		path = "/v1/batches/" + b.ID + "/tasks?limit=100&cursor=" + url.QueryEscape(*l.NextCursor)
	}
	if len(seen) != 250 || !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Fatalf("saw %d tasks in pages %v", len(seen), sizes)
	}
	if !slices.IsSorted(ids) {
		t.Error("tasks are not in plan (id) order")
	}
	// The default limit is 100; a page of exactly all has no next cursor.
	if l := decode[taskList](t, h.do(req{method: "GET", path: "/v1/batches/" + b.ID + "/tasks", actor: "alice"})); len(l.Items) != 100 || l.NextCursor == nil {
		t.Errorf("default page: %d items, next %v", len(l.Items), l.NextCursor)
	}
	if l := decode[taskList](t, h.do(req{method: "GET", path: "/v1/batches/" + b.ID + "/tasks?limit=250", actor: "alice"})); len(l.Items) != 250 || l.NextCursor != nil {
		t.Errorf("limit=250: %d items, next %v", len(l.Items), l.NextCursor)
	}
}

func TestListTasksStateFilter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	b := h.create("alice", "req-1", 3, 1)
	tests := []struct {
		state string
		want  int
	}{
		{"queued", 3}, {"running", 0}, {"succeeded", 0}, {"failed", 0}, {"canceled", 0},
	}
	for _, tc := range tests {
		w := h.do(req{method: "GET", path: "/v1/batches/" + b.ID + "/tasks?state=" + tc.state, actor: "alice"})
		l := decode[taskList](t, w)
		if w.Code != http.StatusOK || len(l.Items) != tc.want || l.NextCursor != nil || l.Items == nil {
			t.Errorf("state=%s: %d, %d items, next %v", tc.state, w.Code, len(l.Items), l.NextCursor)
		}
	}
	// An empty page is [] and null, not nulls.
	w := h.do(req{method: "GET", path: "/v1/batches/" + b.ID + "/tasks?state=running", actor: "alice"})
	if got := strings.TrimSpace(w.Body.String()); got != `{"items":[],"next_cursor":null}` {
		t.Errorf("empty page %s", got)
	}
	h.do(req{method: "POST", path: "/v1/batches/" + b.ID + "/cancel", actor: "alice"})
	if l := decode[taskList](t, h.do(req{method: "GET", path: "/v1/batches/" + b.ID + "/tasks?state=canceled", actor: "alice"})); len(l.Items) != 3 {
		t.Errorf("after cancel, %d canceled tasks", len(l.Items))
	}
}

// TestListBatchesPages: newest first, every batch exactly once.
func TestListBatchesPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	var made []string
	for i := range 7 {
		made = append(made, h.create("alice", "req-"+string(rune('a'+i)), 1, 1).ID)
	}
	h.create("bob", "req-a", 1, 1)
	slices.Reverse(made) // newest first
	var got []string
	path := "/v1/batches?limit=3"
	for range 4 {
		w := h.do(req{method: "GET", path: path, actor: "alice"})
		if w.Code != http.StatusOK {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		l := decode[batchList](t, w)
		for _, b := range l.Items {
			got = append(got, b.ID)
		}
		if l.NextCursor == nil {
			break
		}
		path = "/v1/batches?limit=3&cursor=" + url.QueryEscape(*l.NextCursor)
	}
	if !slices.Equal(got, made) {
		t.Errorf("listed %v, want %v", got, made)
	}
}

func TestListBadQuery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	b := h.create("alice", "req-1", 3, 1)
	other := h.create("alice", "req-2", 3, 1)
	// Real cursors, to reuse where they do not belong.
	cursorOf := func(path string) string {
		t.Helper()
		w := h.do(req{method: "GET", path: path, actor: "alice"})
		var c *string
		if strings.Contains(path, "/tasks") {
			c = decode[taskList](t, w).NextCursor
		} else {
			c = decode[batchList](t, w).NextCursor
		}
		if c == nil {
			t.Fatalf("%s: no next cursor: %s", path, w.Body)
		}
		return url.QueryEscape(*c)
	}
	batchesCursor := cursorOf("/v1/batches?limit=1")
	tasksCursor := cursorOf("/v1/batches/" + b.ID + "/tasks?limit=1")
	otherTasksCursor := cursorOf("/v1/batches/" + other.ID + "/tasks?limit=1")
	queuedCursor := cursorOf("/v1/batches/" + b.ID + "/tasks?limit=1&state=queued")
	forged := func(payload string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(payload))
	}
	tasks := "/v1/batches/" + b.ID + "/tasks"
	tests := []struct {
		name, path, field string
	}{
		{"limit 0", "/v1/batches?limit=0", "limit"},
		{"limit 501", "/v1/batches?limit=501", "limit"},
		{"limit -1", "/v1/batches?limit=-1", "limit"},
		{"limit word", "/v1/batches?limit=ten", "limit"},
		{"limit empty", "/v1/batches?limit=", "limit"},
		{"limit float", "/v1/batches?limit=1.5", "limit"},
		{"limit twice", "/v1/batches?limit=1&limit=2", "limit"},
		{"tasks limit 501", tasks + "?limit=501", "limit"},
		{"cursor garbage", "/v1/batches?cursor=garbage!", "cursor"},
		{"cursor empty", "/v1/batches?cursor=", "cursor"},
		{"cursor padded", "/v1/batches?cursor=" + batchesCursor + "%3D", "cursor"},
		{"cursor truncated", "/v1/batches?cursor=" + batchesCursor[:len(batchesCursor)-3], "cursor"},
		{"tasks cursor on batches", "/v1/batches?cursor=" + tasksCursor, "cursor"},
		{"batches cursor on tasks", tasks + "?cursor=" + batchesCursor, "cursor"},
		{"another batch's cursor", tasks + "?cursor=" + otherTasksCursor, "cursor"},
		{"another filter's cursor", tasks + "?cursor=" + queuedCursor, "cursor"},
		{"forged version", "/v1/batches?cursor=" + forged(`{"v":2,"scope":"batches","after":"`+b.ID+`"}`), "cursor"},
		{"forged id", "/v1/batches?cursor=" + forged(`{"v":1,"scope":"batches","after":"not-an-id"}`), "cursor"},
		{"forged upper-case id", "/v1/batches?cursor=" + forged(`{"v":1,"scope":"batches","after":"`+strings.ToUpper(b.ID)+`"}`), "cursor"},
		{"forged extra member", "/v1/batches?cursor=" + forged(`{"v":1,"scope":"batches","after":"`+b.ID+`","x":1}`), "cursor"},
		{"state unknown", tasks + "?state=done", "state"},
		{"state empty", tasks + "?state=", "state"},
		{"state twice", tasks + "?state=queued&state=failed", "state"},
		{"malformed query", "/v1/batches?limit=%zz", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := wantProblem(t, h.do(req{method: "GET", path: tc.path, actor: "alice"}), http.StatusBadRequest)
			if tc.field != "" && !p.hasField(tc.field) {
				t.Errorf("problem %+v does not name %q", p, tc.field)
			}
		})
	}
	// The real cursors work where they belong.
	for _, path := range []string{
		"/v1/batches?cursor=" + batchesCursor,
		tasks + "?cursor=" + tasksCursor,
		tasks + "?state=queued&cursor=" + queuedCursor,
	} {
		if w := h.do(req{method: "GET", path: path, actor: "alice"}); w.Code != http.StatusOK {
			t.Errorf("%s: %d %s", path, w.Code, w.Body)
		}
	}
}

func TestCancelBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	b := h.create("alice", "req-1", 2, 2)
	for i := range 2 { // idempotent: the second cancel answers the same
		w := h.do(req{method: "POST", path: "/v1/batches/" + b.ID + "/cancel", actor: "alice"})
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("cancel %d: %d %s", i, w.Code, w.Body)
		}
		got := decode[intent.Batch](t, w)
		if got.ID != b.ID || got.State != intent.StateCanceled || got.Counts != (intent.Counts{Canceled: 4}) {
			t.Errorf("cancel %d: %+v", i, got)
		}
	}
}

// TestDeleteBatch: a running batch answers 409, another actor's 404; an
// ended one 204, then 404 (as a random id), and its request id makes a
// new batch.
func TestDeleteBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	b := h.create("alice", "req-del", 1, 2)
	del := func(actor string) *httptest.ResponseRecorder {
		return h.do(req{method: "DELETE", path: "/v1/batches/" + b.ID, actor: actor})
	}
	if p := wantProblem(t, del("alice"), http.StatusConflict); !strings.Contains(p.Detail, "cancel it first") {
		t.Errorf("running batch: %q", p.Detail)
	}
	if w := h.do(req{method: "POST", path: "/v1/batches/" + b.ID + "/cancel", actor: "alice"}); w.Code != http.StatusOK {
		t.Fatalf("cancel: %d %s", w.Code, w.Body)
	}
	wantProblem(t, del("bob"), http.StatusNotFound)
	if w := del("alice"); w.Code != http.StatusNoContent || w.Body.Len() != 0 {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	wantProblem(t, del("alice"), http.StatusNotFound)
	wantProblem(t, h.do(req{method: "GET", path: "/v1/batches/" + b.ID, actor: "alice"}), http.StatusNotFound)
	// The same bytes as the first create: the server's memory of answered
	// bodies (Server.bodies) knows them, and must still find the binding
	// gone rather than replay the deleted batch.
	again := h.create("alice", "req-del", 1, 2) // 201, not a replay
	if again.ID == b.ID {
		t.Fatalf("the freed request id replayed the deleted batch")
	}
}
