package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"studio/httpapi"
	"studio/intent"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	b := h.create("alice", "req-1", 1, 1)
	paths := []struct{ method, path string }{
		{"POST", "/v1/generations"},
		{"GET", "/v1/batches"},
		{"GET", "/v1/batches/" + b.ID},
		{"GET", "/v1/batches/" + b.ID + "/tasks"},
		{"POST", "/v1/batches/" + b.ID + "/cancel"},
		{"GET", "/v1/assets/" + b.ID},
		{"GET", "/v1/assets/" + b.ID + "/content"},
		{"GET", "/v1/no-such-route"}, // the token comes before routing
	}
	tests := []struct {
		name      string
		auth      []string
		challenge string
	}{
		{"no header", nil, `Bearer`},
		{"other scheme", []string{"Basic YWxpY2U6c2VjcmV0"}, `Bearer`},
		{"scheme only", []string{"Bearer"}, `Bearer error="invalid_token"`},
		{"empty token", []string{"Bearer "}, `Bearer error="invalid_token"`},
		{"unknown token", []string{"Bearer stu_nope"}, `Bearer error="invalid_token"`},
		{"the hash as token", []string{"Bearer " + httpapi.HashToken(h.tokens["alice"])}, `Bearer error="invalid_token"`},
		{"two tokens", []string{"Bearer " + h.tokens["alice"], "Bearer " + h.tokens["alice"]}, `Bearer error="invalid_token"`},
		{"token with a space", []string{"Bearer " + h.tokens["alice"] + " x"}, `Bearer error="invalid_token"`},
	}
	for _, tc := range tests {
		for _, p := range paths {
			t.Run(tc.name+" "+p.method+" "+p.path, func(t *testing.T) {
				w := h.do(req{method: p.method, path: p.path, body: genBody("req-2", 1, 1),
					header: http.Header{"Authorization": tc.auth, "Content-Type": {"application/json"}}})
				wantProblem(t, w, http.StatusUnauthorized)
				if got := w.Header().Values("WWW-Authenticate"); !slices.Equal(got, []string{tc.challenge}) {
					t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
				}
			})
		}
	}
	// Nothing was created by the refused POSTs.
	if l := decode[batchList](t, h.do(req{method: "GET", path: "/v1/batches", actor: "alice"})); len(l.Items) != 1 {
		t.Errorf("%d batches after refused requests", len(l.Items))
	}
	// The scheme is case-insensitive.
	w := h.do(req{method: "GET", path: "/v1/batches/" + b.ID, header: http.Header{"Authorization": {"bearer " + h.tokens["alice"]}}})
	if w.Code != http.StatusOK {
		t.Errorf("lower-case scheme: %d %s", w.Code, w.Body)
	}
	if _, ok := w.Header()["Www-Authenticate"]; ok {
		t.Error("an admitted request has a challenge")
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		tok, err := httpapi.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^stu_[A-Za-z0-9_-]{43}$`).MatchString(tok) {
			t.Fatalf("token %q", tok)
		}
		if seen[tok] {
			t.Fatalf("token %q twice", tok)
		}
		seen[tok] = true
	}
	sum := sha256.Sum256([]byte("stu_x"))
	if got := httpapi.HashToken("stu_x"); got != hex.EncodeToString(sum[:]) {
		t.Errorf("HashToken %q", got)
	}
}

func TestAssets(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	data := []byte("\x89PNG\r\n\x1a\n pretend image bytes")
	a := h.addAsset("alice", data)
	etag := `"` + a.SHA256 + `"`

	w := h.do(req{method: "GET", path: "/v1/assets/" + a.ID, actor: "alice"})
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if got := decode[intent.Asset](t, w); got.ID != a.ID || got.SHA256 != a.SHA256 || got.Size != int64(len(data)) ||
		got.TaskID != nil || got.ContentType != "image/png" || !got.CreatedAt.Equal(a.CreatedAt) {
		t.Errorf("asset %+v, want %+v", got, a)
	}

	tests := []struct {
		name        string
		ifNoneMatch []string
		want        int
	}{
		{"no condition", nil, http.StatusOK},
		{"matching", []string{etag}, http.StatusNotModified},
		{"matching in a list", []string{`"other", ` + etag}, http.StatusNotModified},
		{"weak match", []string{"W/" + etag}, http.StatusNotModified},
		{"star", []string{"*"}, http.StatusNotModified},
		{"other", []string{`"0000"`}, http.StatusOK},
		{"unquoted", []string{a.SHA256}, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := h.do(req{method: "GET", path: "/v1/assets/" + a.ID + "/content", actor: "alice", header: http.Header{"If-None-Match": tc.ifNoneMatch}})
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body)
			}
			if got := w.Header().Get("ETag"); got != etag {
				t.Errorf("ETag %q, want %q", got, etag)
			}
			if tc.want == http.StatusNotModified {
				if w.Body.Len() != 0 {
					t.Errorf("304 with a body of %d bytes", w.Body.Len())
				}
				return
			}
			if ct := w.Header().Get("Content-Type"); ct != "image/png" {
				t.Errorf("Content-Type %q", ct)
			}
			if w.Body.String() != string(data) || w.Header().Get("Content-Length") != fmt.Sprint(len(data)) {
				t.Errorf("body %q (Content-Length %s)", w.Body, w.Header().Get("Content-Length"))
			}
		})
	}
}

func TestAssetContentWithoutBlobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{noBlobs: true})
	a := h.addAsset("alice", []byte("bytes"))
	wantProblem(t, h.do(req{method: "GET", path: "/v1/assets/" + a.ID + "/content", actor: "alice"}), http.StatusServiceUnavailable)
}

func TestMissingBlobIsInternal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	a := h.addAsset("alice", []byte("bytes"))
	h.blobs.mu.Lock()
	delete(h.blobs.data, a.SHA256)
	h.blobs.mu.Unlock()
	p := wantProblem(t, h.do(req{method: "GET", path: "/v1/assets/" + a.ID + "/content", actor: "alice"}), http.StatusInternalServerError)
	if p.Detail != "Internal error." || strings.Contains(p.Detail, a.SHA256) {
		t.Errorf("detail %q", p.Detail)
	}
	if !strings.Contains(h.logs.String(), "no blob "+a.SHA256) {
		t.Errorf("the cause is not logged: %s", h.logs)
	}
}

func TestOperations(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	for _, path := range []string{"/healthz", "/readyz"} {
		w := h.do(req{method: "GET", path: path})
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || strings.TrimSpace(w.Body.String()) != `{"status":"ok"}` {
			t.Errorf("%s: %d %q %s", path, w.Code, w.Header().Get("Content-Type"), w.Body)
		}
	}
	w := h.do(req{method: "GET", path: "/openapi.json"})
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || !strings.Contains(w.Body.String(), `"openapi": "3.1.0"`) {
		t.Errorf("/openapi.json: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	// A closed database is not ready; the process still lives.
	h.store.Close()
	wantProblem(t, h.do(req{method: "GET", path: "/readyz"}), http.StatusServiceUnavailable)
	if w := h.do(req{method: "GET", path: "/healthz"}); w.Code != http.StatusOK {
		t.Errorf("/healthz after the store closed: %d", w.Code)
	}
}

func TestMetricsHook(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, "studio_up 1")
	})
	var mu sync.Mutex
	var records []httpapi.RequestRecord
	h := newHarness(t, options{metrics: metrics, observe: func(r httpapi.RequestRecord) {
		mu.Lock()
		defer mu.Unlock()
		records = append(records, r)
	}})
	w := h.do(req{method: "GET", path: "/metrics"})
	if w.Code != http.StatusOK || w.Body.String() != "studio_up 1\n" {
		t.Errorf("/metrics: %d %s", w.Code, w.Body)
	}
	b := h.create("alice", "req-1", 1, 1)
	h.do(req{method: "GET", path: "/v1/batches/" + b.ID, actor: "bob"})
	mu.Lock()
	defer mu.Unlock()
	want := []httpapi.RequestRecord{
		{Method: "GET", Route: "/metrics", Status: 200},
		{Method: "POST", Route: "/v1/generations", Status: 201, Actor: "alice", RequestID: "req-1"},
		{Method: "GET", Route: "/v1/batches/{id}", Status: 404, Actor: "bob"},
	}
	if len(records) != len(want) {
		t.Fatalf("records %+v", records)
	}
	for i := range want {
		got := records[i]
		if got.Duration <= 0 {
			t.Errorf("record %d: duration %v", i, got.Duration)
		}
		got.Duration = 0
		if got != want[i] {
			t.Errorf("record %d: %+v, want %+v", i, got, want[i])
		}
	}
	// Without a Metrics handler there is no /metrics route.
	plain := newHarness(t, options{})
	wantProblem(t, plain.do(req{method: "GET", path: "/metrics"}), http.StatusNotFound)
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	wantProblem(t, h.do(req{method: "GET", path: "/nope"}), http.StatusNotFound)
	wantProblem(t, h.do(req{method: "GET", path: "/v1/nope", actor: "alice"}), http.StatusNotFound)
	wantProblem(t, h.do(req{method: "GET", path: "/v1/batches/", actor: "alice"}), http.StatusNotFound)
	tests := []struct {
		method, path string
		actor        string
		allow        []string
	}{
		{"GET", "/v1/generations", "alice", []string{"POST"}},
		{"DELETE", "/v1/batches", "alice", []string{"GET", "HEAD"}},
		{"PUT", "/v1/batches/x", "alice", []string{"GET", "HEAD", "DELETE"}},
		{"GET", "/v1/batches/x/cancel", "alice", []string{"POST"}},
		{"POST", "/healthz", "", []string{"GET", "HEAD"}},
		{"DELETE", "/openapi.json", "", []string{"GET", "HEAD"}},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			w := h.do(req{method: tc.method, path: tc.path, actor: tc.actor})
			wantProblem(t, w, http.StatusMethodNotAllowed)
			if got := w.Header().Values("Allow"); !slices.Equal(got, tc.allow) {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
		})
	}
}

// failingGens is a Generations that fails in a given way.
type failingGens struct {
	err   error
	panic bool
}

func (f failingGens) CreateGeneration(ctx context.Context, actor, requestID string, in intent.GenerationInput) (intent.GenerationResult, error) {
	if f.panic {
		panic("planner exploded: secret detail")
	}
	return intent.GenerationResult{}, f.err
}

func (f failingGens) ReplayGeneration(ctx context.Context, actor, requestID, fp string) (intent.GenerationResult, bool, error) {
	return intent.GenerationResult{}, false, nil
}

// TestErrorMapping: each domain code answers its status; internal errors
// are logged with their details and answered without them.
func TestErrorMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		gens   failingGens
		status int
		detail string
		logged bool
	}{
		{"invalid", failingGens{err: intent.Errorf(intent.EInvalid, "Bad.")}, 400, "Bad.", false},
		{"not found", failingGens{err: intent.Errorf(intent.ENotFound, "Gone.")}, 404, "Gone.", false},
		{"conflict", failingGens{err: fmt.Errorf("wrapped: %w", &intent.Error{Code: intent.EConflict, Message: intent.ConflictMessage})}, 409, intent.ConflictMessage, false},
		{"too large", failingGens{err: intent.Errorf(intent.ETooLarge, "Big.")}, 413, "Big.", false},
		{"media", failingGens{err: intent.Errorf(intent.EUnsupportedMedia, "Type.")}, 415, "Type.", false},
		{"unprocessable", failingGens{err: intent.Errorf(intent.EUnprocessable, "No plan.")}, 422, "No plan.", false},
		{"unavailable", failingGens{err: intent.Errorf(intent.EUnavailable, "Later.")}, 503, "Later.", false},
		{"unauthorized", failingGens{err: intent.Errorf(intent.EUnauthorized, "Who?")}, 401, "Who?", false},
		{"internal code", failingGens{err: intent.Errorf(intent.EInternal, "secret detail")}, 500, "Internal error.", true},
		{"plain error", failingGens{err: errors.New("disk on fire: secret detail")}, 500, "Internal error.", true},
		{"unknown code", failingGens{err: intent.Errorf("weird", "secret detail")}, 500, "Internal error.", true},
		{"panic", failingGens{panic: true}, 500, "Internal error.", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, options{gens: tc.gens})
			p := wantProblem(t, h.post("alice", genBody("req-1", 1, 1)), tc.status)
			if p.Detail != tc.detail {
				t.Errorf("detail %q, want %q", p.Detail, tc.detail)
			}
			logged := strings.Contains(h.logs.String(), "secret detail")
			if logged != tc.logged {
				t.Errorf("details logged: %v, want %v: %s", logged, tc.logged, h.logs)
			}
		})
	}
}

// TestRequestLog: one line per request with method, route, status,
// duration, actor and request id, and never the token or the body.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	h.post("alice", genBody("req-log", 1, 1))
	h.do(req{method: "GET", path: "/v1/batches", actor: "alice"})
	h.do(req{method: "GET", path: "/v1/batches", header: http.Header{"Authorization": {"Bearer stu_wrong"}}})
	h.do(req{method: "GET", path: "/nope"})
	var reqs []map[string]any
	for _, l := range h.logs.lines(t) {
		if l["msg"] == "request" {
			reqs = append(reqs, l)
		}
	}
	want := []map[string]any{
		{"method": "POST", "route": "/v1/generations", "status": float64(201), "actor": "alice", "request_id": "req-log"},
		{"method": "GET", "route": "/v1/batches", "status": float64(200), "actor": "alice"},
		{"method": "GET", "status": float64(401)},
		{"method": "GET", "route": "", "status": float64(404)},
	}
	if len(reqs) != len(want) {
		t.Fatalf("%d request lines: %v", len(reqs), reqs)
	}
	for i, w := range want {
		for k, v := range w {
			if reqs[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, reqs[i][k], v, reqs[i])
			}
		}
		if _, ok := reqs[i]["duration"]; !ok {
			t.Errorf("line %d has no duration", i)
		}
		if _, ok := w["actor"]; !ok {
			if _, has := reqs[i]["actor"]; has {
				t.Errorf("line %d names an actor: %v", i, reqs[i])
			}
		}
	}
	all := h.logs.String()
	for _, secret := range []string{h.tokens["alice"], "stu_wrong", "a knight in the rain"} {
		if strings.Contains(all, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
}

func TestNewNeedsDependencies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	if _, err := httpapi.New(httpapi.Config{Store: h.store}); err == nil {
		t.Error("New without a generations service")
	}
	if _, err := httpapi.New(httpapi.Config{Generations: failingGens{}}); err == nil {
		t.Error("New without a store")
	}
}
