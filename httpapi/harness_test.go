package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"go.uber.org/goleak"

	"studio/httpapi"
	"studio/intent"
	"studio/intent/intenttest"
	"studio/planner"
	"studio/store/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// harness is the API over the real SQLite store, the real intent service
// and the real planner with the embedded catalog, in a fresh database under
// t.TempDir().
type harness struct {
	t      testing.TB
	store  *sqlite.Store
	server *httpapi.Server
	gens   httpapi.Generations
	h      http.Handler
	blobs  *memBlobs
	logs   *syncBuffer
	tokens map[string]string // actor -> token
}

// options change what newHarness builds.
type options struct {
	gens    httpapi.Generations // instead of the real service
	noBlobs bool
	observe func(httpapi.RequestRecord)
	metrics http.Handler
	limits  httpapi.Limits
	// cursorKey signs list cursors; a random one when nil.
	cursorKey []byte
	events    httpapi.Events
}

func newHarness(t testing.TB, o options) *harness {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "studio.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{t: t, store: st, blobs: &memBlobs{data: map[string][]byte{}}, logs: &syncBuffer{}, tokens: map[string]string{}}
	gens := o.gens
	if gens == nil {
		gens = &intent.Service{Store: st, Planner: planner.New(planner.EmbeddedCatalog()), Locker: &intenttest.KeyedMutex{}}
	}
	h.gens = gens
	cfg := httpapi.Config{
		Generations: gens,
		Store:       st,
		Blobs:       h.blobs,
		Logger:      slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Observe:     o.observe,
		Metrics:     o.metrics,
		Limits:      o.limits,
		CursorKey:   o.cursorKey,
		Events:      o.events,
	}
	if o.noBlobs {
		cfg.Blobs = nil
	}
	h.server, err = httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.h = h.server.Handler()
	for _, actor := range []string{"alice", "bob"} {
		tok, err := httpapi.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CreateToken(ctx, actor, httpapi.HashToken(tok)); err != nil {
			t.Fatal(err)
		}
		h.tokens[actor] = tok
	}
	return h
}

// req describes one request.
type req struct {
	method, path string
	actor        string // "" sends no Authorization header
	body         string
	header       http.Header
}

// do serves r and returns the recorded answer.
func (h *harness) do(r req) *httptest.ResponseRecorder {
	h.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	for k, vs := range r.header {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	if r.actor != "" {
		hr.Header.Set("Authorization", "Bearer "+h.tokens[r.actor])
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, hr)
	return w
}

// post sends a JSON body to POST /v1/generations as the actor.
func (h *harness) post(actor, body string, hdr ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	header := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(hdr); i += 2 {
		header.Add(hdr[i], hdr[i+1])
	}
	return h.do(req{method: http.MethodPost, path: "/v1/generations", actor: actor, body: body, header: header})
}

// create makes a batch and returns it.
func (h *harness) create(actor, requestID string, frames, candidates int) intent.Batch {
	h.t.Helper()
	w := h.post(actor, genBody(requestID, frames, candidates))
	if w.Code != http.StatusCreated {
		h.t.Fatalf("create %s: %d %s", requestID, w.Code, w.Body)
	}
	return decode[intent.Batch](h.t, w)
}

// genBody is a valid generation body: one set of n frames on the sketch
// generator with the given candidates.
func genBody(requestID string, frames, candidates int) string {
	in := map[string]any{
		"prompt":     "a knight in the rain, side view",
		"sets":       []any{map[string]any{"collection": "walk-cycle", "frames": frameLabels(frames)}},
		"providers":  []string{"sketch"},
		"candidates": candidates,
	}
	if requestID != "" {
		in["request_id"] = requestID
	}
	b, err := json.Marshal(in, json.Deterministic(true))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func frameLabels(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("f%03d", i+1)
	}
	return out
}

// decode strictly decodes an answer's JSON body: a field the type does not
// know fails the test (nothing extra, such as the actor, leaks out).
func decode[T any](t testing.TB, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v, json.RejectUnknownMembers(true)); err != nil {
		t.Fatalf("decode %T from %q: %v", v, w.Body, err)
	}
	return v
}

// problem is the problem document as a client reads it.
type problem struct {
	Type   string              `json:"type"`
	Title  string              `json:"title"`
	Status int                 `json:"status"`
	Detail string              `json:"detail"`
	Errors []intent.FieldError `json:"errors,omitempty"`
}

// wantProblem checks that w is a problem document with the status and
// returns it.
func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int) problem {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	p := decode[problem](t, w)
	if p.Type != "about:blank" || p.Status != status || p.Title != http.StatusText(status) || p.Detail == "" {
		t.Fatalf("problem %+v for status %d", p, status)
	}
	return p
}

// hasField reports whether a problem names the field.
func (p problem) hasField(field string) bool {
	return slices.ContainsFunc(p.Errors, func(e intent.FieldError) bool { return e.Field == field })
}

// memBlobs is an in-memory httpapi.Blobs.
type memBlobs struct {
	mu    sync.Mutex
	data  map[string][]byte
	opens int
}

func (b *memBlobs) put(data []byte) string {
	sum := sha256.Sum256(data)
	key := hex.EncodeToString(sum[:])
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data[key] = data
	return key
}

func (b *memBlobs) Open(ctx context.Context, sha string) (io.ReadSeekCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opens++
	d, ok := b.data[sha]
	if !ok {
		return nil, intent.Errorf(intent.ENotFound, "no blob %s", sha)
	}
	return nopCloser{bytes.NewReader(d)}, nil
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// addAsset stores bytes and an asset row for the actor (an upload: no
// task). The store contract has no asset writer yet, so the row goes in
// with SQL on the store's own write pool.
func (h *harness) addAsset(actor string, data []byte) intent.Asset {
	h.t.Helper()
	id, err := intent.NewID()
	if err != nil {
		h.t.Fatal(err)
	}
	a := intent.Asset{ID: id, Actor: actor, SHA256: h.blobs.put(data), ContentType: "image/png",
		Size: int64(len(data)), Width: 16, Height: 16, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	_, err = h.store.DB().Exec(`INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		VALUES (?, ?, NULL, ?, ?, ?, ?, ?, ?)`, a.ID, actor, a.SHA256, a.ContentType, a.Size, a.Width, a.Height, a.CreatedAt.UnixMilli())
	if err != nil {
		h.t.Fatal(err)
	}
	return a
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the logged records as maps.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}
