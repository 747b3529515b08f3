package httpapi_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"studio/intent"
)

func TestCreateGenerationCreated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	w := h.post("alice", genBody("req-1", 2, 3))
	if w.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	b := decode[intent.Batch](t, w)
	if got, want := w.Header().Get("Location"), "/v1/batches/"+b.ID; got != want {
		t.Errorf("Location %q, want %q", got, want)
	}
	if _, ok := w.Header()["Idempotent-Replayed"]; ok {
		t.Errorf("a created answer has Idempotent-Replayed: %q", w.Header().Get("Idempotent-Replayed"))
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	u, err := uuid.Parse(b.ID)
	if err != nil || u.Version() != 7 {
		t.Errorf("id %q is not a UUIDv7 (%v)", b.ID, err)
	}
	want := intent.Counts{Queued: 6}
	if b.RequestID != "req-1" || b.State != intent.StateQueued || b.TaskCount != 6 || b.Counts != want || b.Prompt != "a knight in the rain, side view" {
		t.Errorf("batch %+v", b)
	}
	// Times are RFC 3339 in UTC, as written on the wire.
	for _, field := range []string{`"created_at":"`, `"updated_at":"`} {
		i := strings.Index(w.Body.String(), field)
		if i < 0 {
			t.Fatalf("no %s in %s", field, w.Body)
		}
		v := w.Body.String()[i+len(field):]
		v = v[:strings.IndexByte(v, '"')]
		ts, err := time.Parse(time.RFC3339Nano, v)
		if err != nil || !strings.HasSuffix(v, "Z") || ts.IsZero() {
			t.Errorf("%s%s is not RFC 3339 UTC (%v)", field, v, err)
		}
	}
}

func TestCreateGenerationReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	first := h.create("alice", "req-1", 2, 1)
	// The same id and input, however it is sent: the body, the header
	// quoted, the header bare, both agreeing, keys in another order.
	reordered := `{"candidates":1,"providers":["sketch"],"sets":[{"frames":["f001","f002"],"collection":"walk-cycle"}],"prompt":"a knight in the rain, side view","request_id":"req-1"}`
	tests := []struct {
		name string
		body string
		hdr  []string
	}{
		{"body", genBody("req-1", 2, 1), nil},
		{"header quoted", genBody("", 2, 1), []string{"Idempotency-Key", `"req-1"`}},
		{"header bare", genBody("", 2, 1), []string{"Idempotency-Key", "req-1"}},
		{"both agree", genBody("req-1", 2, 1), []string{"Idempotency-Key", `"req-1"`}},
		{"reordered keys", reordered, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := h.post("alice", tc.body, tc.hdr...)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if got := w.Header().Get("Idempotent-Replayed"); got != "true" {
				t.Errorf("Idempotent-Replayed %q", got)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if b := decode[intent.Batch](t, w); b.ID != first.ID || b.RequestID != "req-1" || b.TaskCount != 2 {
				t.Errorf("replayed %+v, want batch %s", b, first.ID)
			}
		})
	}
	// Another actor with the same id makes its own batch.
	if b := h.create("bob", "req-1", 2, 1); b.ID == first.ID {
		t.Errorf("bob's req-1 answered alice's batch")
	}
	if w := h.do(req{method: "GET", path: "/v1/batches?limit=500", actor: "alice"}); len(decode[batchList](t, w).Items) != 1 {
		t.Errorf("replays made new batches: %s", w.Body)
	}
}

func TestCreateGenerationConflict(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	first := h.create("alice", "req-1", 2, 1)
	tests := []struct {
		name string
		body string
		hdr  []string
	}{
		{"more candidates", genBody("req-1", 2, 2), nil},
		{"fewer frames", genBody("req-1", 1, 1), nil},
		{"header", genBody("", 1, 1), []string{"Idempotency-Key", "req-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := wantProblem(t, h.post("alice", tc.body, tc.hdr...), http.StatusConflict)
			if p.Detail != intent.ConflictMessage {
				t.Errorf("detail %q, want %q", p.Detail, intent.ConflictMessage)
			}
		})
	}
	w := h.do(req{method: "GET", path: "/v1/batches/" + first.ID, actor: "alice"})
	if b := decode[intent.Batch](t, w); b.TaskCount != 2 {
		t.Errorf("a conflict changed the batch: %+v", b)
	}
}

func TestCreateGenerationMediaType(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	tests := []struct {
		name string
		ct   []string // nil: no Content-Type at all
		want int
	}{
		{"none", nil, http.StatusUnsupportedMediaType},
		{"empty", []string{""}, http.StatusUnsupportedMediaType},
		{"text/plain", []string{"text/plain"}, http.StatusUnsupportedMediaType},
		{"merge-patch+json", []string{"application/merge-patch+json"}, http.StatusUnsupportedMediaType},
		{"problem+json", []string{"application/problem+json"}, http.StatusUnsupportedMediaType},
		{"form", []string{"application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"malformed", []string{"application/json;;"}, http.StatusUnsupportedMediaType},
		{"json", []string{"application/json"}, http.StatusCreated},
		{"json charset", []string{"application/json; charset=utf-8"}, http.StatusCreated},
		{"json upper case", []string{"Application/JSON"}, http.StatusCreated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := req{method: "POST", path: "/v1/generations", actor: "alice", body: genBody("mt-"+tc.name, 1, 1), header: http.Header{}}
			if tc.ct != nil {
				r.header["Content-Type"] = tc.ct
			}
			w := h.do(r)
			if tc.want != http.StatusCreated {
				wantProblem(t, w, tc.want)
				return
			}
			if w.Code != tc.want {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
		})
	}
}

func TestCreateGenerationBodyLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	const limit = 1 << 20
	// A valid body padded with spaces to exactly n bytes.
	padded := func(id string, n int) string {
		b := genBody(id, 1, 1)
		return b + strings.Repeat(" ", n-len(b))
	}
	tests := []struct {
		name    string
		body    string
		ct      string
		chunked bool // no Content-Length: the limit bites while reading
		want    int
	}{
		{"exactly 1 MiB", padded("big-1", limit), "application/json", false, http.StatusCreated},
		{"1 MiB + 1", padded("big-2", limit+1), "application/json", false, http.StatusRequestEntityTooLarge},
		{"1 MiB + 1 chunked", padded("big-3", limit+1), "application/json", true, http.StatusRequestEntityTooLarge},
		{"exactly 1 MiB chunked", padded("big-4", limit), "application/json", true, http.StatusCreated},
		{"415 before 413", padded("big-5", limit+1), "text/plain", false, http.StatusUnsupportedMediaType},
		{"413 before 400", strings.Repeat("x", limit+1), "application/json", false, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/generations", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", tc.ct)
			r.Header.Set("Authorization", "Bearer "+h.tokens["alice"])
			if tc.chunked {
				r.ContentLength = -1
			}
			w := httptest.NewRecorder()
			h.h.ServeHTTP(w, r)
			if tc.want != http.StatusCreated {
				wantProblem(t, w, tc.want)
				return
			}
			if w.Code != tc.want {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
		})
	}
}

func TestCreateGenerationBadRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	h.create("alice", "taken", 1, 1)
	tests := []struct {
		name  string
		body  string
		hdr   []string
		field string // a field the problem must name; "" for none
	}{
		{"malformed JSON", `{"request_id": "x",`, nil, ""},
		{"not an object", `[]`, nil, ""},
		{"trailing data", genBody("t-1", 1, 1) + `{}`, nil, ""},
		{"unknown field", strings.Replace(genBody("t-2", 1, 1), `{`, `{"colour":"red",`, 1), nil, "colour"},
		{"wrong type", strings.Replace(genBody("t-3", 1, 1), `"candidates":1`, `"candidates":"1"`, 1), nil, "candidates"},
		{"candidates out of range", genBody("t-4", 1, 11), nil, "candidates"},
		{"no request id", genBody("", 1, 1), nil, "request_id"},
		{"empty request id", genBody("", 1, 1), []string{"Idempotency-Key", `""`}, "Idempotency-Key"},
		{"header and body differ", genBody("t-5", 1, 1), []string{"Idempotency-Key", "t-6"}, "request_id"},
		{"header twice", genBody("", 1, 1), []string{"Idempotency-Key", "t-7", "Idempotency-Key", "t-7"}, "Idempotency-Key"},
		{"header badly quoted", genBody("", 1, 1), []string{"Idempotency-Key", `"t-8`}, "Idempotency-Key"},
		{"request id too long", genBody(strings.Repeat("x", 101), 1, 1), nil, "request_id"},
		// A bad body is 400 even when its id is bound to other input (400
		// comes before 409).
		{"bad body with a taken id", genBody("taken", 1, 11), nil, "candidates"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := wantProblem(t, h.post("alice", tc.body, tc.hdr...), http.StatusBadRequest)
			if tc.field != "" && !p.hasField(tc.field) {
				t.Errorf("problem %+v does not name %q", p, tc.field)
			}
		})
	}
}

func TestCreateGenerationUnprocessable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	tests := []struct {
		name     string
		body     string
		contains []string
	}{
		// 60 frames x 2 providers (auto) x 6 candidates = 720 tasks.
		{"task limit", `{"request_id":"u-1","prompt":"p","sets":[{"collection":"c","frames":` + jsonList(frameLabels(60)) + `}],"providers":["auto"],"candidates":6}`, []string{"720", "600"}},
		{"unknown generator", strings.Replace(genBody("u-2", 1, 1), `"sketch"`, `"nope"`, 1), []string{"nope"}},
		{"invisible subject", strings.Replace(genBody("u-3", 1, 1), `{`, `{"subjects":["ghost"],`, 1), []string{"ghost"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := wantProblem(t, h.post("alice", tc.body), http.StatusUnprocessableEntity)
			for _, s := range tc.contains {
				if !strings.Contains(p.Detail, s) {
					t.Errorf("detail %q does not name %s", p.Detail, s)
				}
			}
		})
	}
	// Nothing was written: the refused id is free for a valid body.
	if w := h.post("alice", genBody("u-1", 1, 1)); w.Code != http.StatusCreated {
		t.Errorf("after a 422 the id answers %d: %s", w.Code, w.Body)
	}
}

func jsonList(ss []string) string {
	return `["` + strings.Join(ss, `","`) + `"]`
}

// TestCreateGenerationConcurrent sends one request id many times at once
// over a real connection: one 201, every other answer a 200 replay, all
// naming the same batch.
func TestCreateGenerationConcurrent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	srv := httptest.NewServer(h.h)
	defer srv.Close()
	const n = 32
	body := genBody("same", 3, 2)
	var wg sync.WaitGroup
	codes := make([]int, n)
	bodies := make([]*httptest.ResponseRecorder, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			r, err := http.NewRequest("POST", srv.URL+"/v1/generations", strings.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer "+h.tokens["alice"])
			resp, err := srv.Client().Do(r)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			rec := httptest.NewRecorder()
			rec.Code = resp.StatusCode
			if _, err := rec.Body.ReadFrom(resp.Body); err != nil {
				errs[i] = err
				return
			}
			codes[i], bodies[i] = resp.StatusCode, rec
		})
	}
	wg.Wait()
	created := 0
	var first string
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch codes[i] {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("answer %d: status %d: %s", i, codes[i], bodies[i].Body)
		}
		id := decode[intent.Batch](t, bodies[i]).ID
		if first == "" {
			first = id
		}
		if id != first {
			t.Fatalf("answers name batches %s and %s", first, id)
		}
	}
	if created != 1 {
		t.Fatalf("%d answers were 201, want 1", created)
	}
}

// unreadable fails every read: a body that must not be read at all.
type unreadable struct{ reads *int }

func (u unreadable) Read([]byte) (int, error) {
	*u.reads++
	return 0, errors.New("the body was read")
}

// TestCreateGenerationDeclaredTooLarge: a declared length over the limit is
// refused before a byte of the body is read; an unsupported type before
// that.
func TestCreateGenerationDeclaredTooLarge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	for _, tc := range []struct {
		ct   string
		want int
	}{
		{"application/json", http.StatusRequestEntityTooLarge},
		{"text/plain", http.StatusUnsupportedMediaType},
	} {
		reads := 0
		r := httptest.NewRequest("POST", "/v1/generations", unreadable{&reads})
		r.ContentLength = 1<<20 + 1
		r.Header.Set("Content-Type", tc.ct)
		r.Header.Set("Authorization", "Bearer "+h.tokens["alice"])
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		wantProblem(t, w, tc.want)
		if reads != 0 {
			t.Errorf("%s: the body was read %d times", tc.ct, reads)
		}
	}
}
