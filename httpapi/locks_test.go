package httpapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json"

	"studio/httpapi"
	"studio/intent"
	"studio/intent/intenttest"
	"studio/internal/testsignal"
	"studio/locks"
	"studio/lockservice"
	"studio/planner"
	"studio/store/sqlite"
)

// lockLease is a lease as a client reads it.
type lockLease struct {
	LeaseID   string `json:"lease_id"`
	RequestID string `json:"request_id"`
	Name      string `json:"name"`
	Key       string `json:"key"`
	Limit     int    `json:"limit"`
	Fence     int64  `json:"fence"`
	TTLMs     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
	State     string `json:"state"`
}

type lockInfo struct {
	Name    string `json:"name"`
	Key     string `json:"key"`
	Limit   int    `json:"limit"`
	Held    bool   `json:"held"`
	Holders []struct {
		Fence     int64  `json:"fence"`
		ExpiresAt string `json:"expires_at"`
	} `json:"holders"`
	Waiters int `json:"waiters"`
}

// newLockHarness is the API with a lock service over a memory engine, and
// the tokens of alice and bob.
func newLockHarness(t *testing.T) *harness {
	t.Helper()
	return newLockHarnessConfig(t, lockservice.Config{})
}

// newLockHarnessConfig is newLockHarness with the lock service's config
// (its engine is set here).
func newLockHarnessConfig(t testing.TB, cfg lockservice.Config) *harness {
	t.Helper()
	h, _, _ := newLockHarnessParts(t, cfg, httpapi.Limits{})
	return h
}

// newLockHarnessParts also returns the lock service and its engine; the
// server has limits.
func newLockHarnessParts(t testing.TB, cfg lockservice.Config, limits httpapi.Limits) (*harness, *lockservice.Service, *locks.Engine) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "studio.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := locks.New(locks.NewMemoryStore())
	t.Cleanup(func() { eng.Close() })
	cfg.Engine = eng
	svc, err := lockservice.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	h := &harness{t: t, store: st, logs: &syncBuffer{}, tokens: map[string]string{}}
	h.server, err = httpapi.New(httpapi.Config{
		Generations: &intent.Service{Store: st, Planner: planner.New(planner.EmbeddedCatalog()), Locker: &intenttest.KeyedMutex{}},
		Store:       st,
		Locks:       svc,
		Logger:      slog.New(slog.NewJSONHandler(h.logs, nil)),
		Limits:      limits,
	})
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
	return h, svc, eng
}

func jsonHeader() http.Header { return http.Header{"Content-Type": {"application/json"}} }

func (h *harness) lockCall(actor, op, body string) *httptest.ResponseRecorder {
	h.t.Helper()
	return h.do(req{method: http.MethodPost, path: "/v1/locks/" + op, actor: actor, body: body, header: jsonHeader()})
}

func acquireJSON(requestID, name, key string, ttlMs, waitMs int64, limit int) string {
	b, err := json.Marshal(map[string]any{"request_id": requestID, "name": name, "key": key,
		"ttl_ms": ttlMs, "wait_ms": waitMs, "limit": limit}, json.Deterministic(true))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func leaseJSON(id string) string { return fmt.Sprintf(`{"lease_id":%q}`, id) }

func (h *harness) acquire(t *testing.T, actor, requestID, key string, waitMs int64) lockLease {
	t.Helper()
	w := h.lockCall(actor, "acquire", acquireJSON(requestID, "jobs", key, 30000, waitMs, 0))
	if w.Code != http.StatusCreated {
		t.Fatalf("acquire %s/%s as %s: %d %s", requestID, key, actor, w.Code, w.Body)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	return decode[lockLease](t, w)
}

func (h *harness) inspect(t *testing.T, actor, key string, limit int) lockInfo {
	t.Helper()
	q := url.Values{"name": {"jobs"}, "key": {key}}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	w := h.do(req{method: http.MethodGet, path: "/v1/locks/inspect?" + q.Encode(), actor: actor})
	if w.Code != http.StatusOK {
		t.Fatalf("inspect %s as %s: %d %s", key, actor, w.Code, w.Body)
	}
	return decode[lockInfo](t, w)
}

func TestLocksNeedAToken(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	for _, r := range []req{
		{method: http.MethodPost, path: "/v1/locks/acquire", body: acquireJSON("r1", "jobs", "k", 30000, 0, 0), header: jsonHeader()},
		{method: http.MethodPost, path: "/v1/locks/renew", body: leaseJSON("x"), header: jsonHeader()},
		{method: http.MethodPost, path: "/v1/locks/release", body: leaseJSON("x"), header: jsonHeader()},
		{method: http.MethodGet, path: "/v1/locks/inspect?name=jobs&key=k"},
	} {
		w := h.do(r)
		wantProblem(t, w, http.StatusUnauthorized)
		if w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: no WWW-Authenticate", r.method, r.path)
		}
		r.header = r.header.Clone()
		if r.header == nil {
			r.header = http.Header{}
		}
		r.header.Set("Authorization", "Bearer stu_not-a-token")
		wantProblem(t, h.do(r), http.StatusUnauthorized)
	}
	// Nothing was taken by the refused acquire.
	if info := h.inspect(t, "alice", "k", 0); info.Held {
		t.Fatalf("key held after refused acquires: %+v", info)
	}
}

func TestLocksLifecycle(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	a := h.acquire(t, "alice", "r1", "report", 0)
	if a.LeaseID == "" || a.Fence < 1 || a.State != "held" || a.TTLMs != 30000 || a.Name != "jobs" || a.Key != "report" || a.RequestID != "r1" {
		t.Fatalf("lease %+v", a)
	}
	exp, err := time.Parse(time.RFC3339, a.ExpiresAt)
	if err != nil || exp.Before(time.Now().Add(20*time.Second)) {
		t.Fatalf("expires_at %q: %v", a.ExpiresAt, err)
	}

	// Held: another acquire of alice's waits, then 423, binding nothing.
	w := h.lockCall("alice", "acquire", acquireJSON("r2", "jobs", "report", 30000, 50, 0))
	p := wantProblem(t, w, http.StatusLocked)
	if !strings.Contains(p.Detail, "not free") {
		t.Errorf("423 detail %q", p.Detail)
	}
	// Bob's key of the same name is another key: free.
	b := h.acquire(t, "bob", "r1", "report", 0)
	if b.LeaseID == a.LeaseID {
		t.Fatal("two actors got one lease id")
	}

	// Inspect shows the holder's fence, never a lease id, and only the
	// actor's own key.
	info := h.inspect(t, "alice", "report", 0)
	if !info.Held || len(info.Holders) != 1 || info.Holders[0].Fence != a.Fence {
		t.Fatalf("alice's inspect %+v, want her fence %d", info, a.Fence)
	}
	if info := h.inspect(t, "bob", "report", 0); len(info.Holders) != 1 || info.Holders[0].Fence != b.Fence {
		t.Fatalf("bob's inspect %+v, want his fence %d", info, b.Fence)
	}

	// Bob cannot renew or release alice's lease: 404, and it stays held.
	wantProblem(t, h.lockCall("bob", "renew", leaseJSON(a.LeaseID)), http.StatusNotFound)
	wantProblem(t, h.lockCall("bob", "release", leaseJSON(a.LeaseID)), http.StatusNotFound)
	wantProblem(t, h.lockCall("alice", "renew", leaseJSON("no-such-lease")), http.StatusNotFound)

	w = h.lockCall("alice", "renew", leaseJSON(a.LeaseID))
	if w.Code != http.StatusOK {
		t.Fatalf("renew: %d %s", w.Code, w.Body)
	}
	if r := decode[lockLease](t, w); r.ExpiresAt < a.ExpiresAt || r.Fence != a.Fence || r.State != "held" {
		t.Fatalf("renewed %+v after %+v", r, a)
	}

	w = h.lockCall("alice", "release", leaseJSON(a.LeaseID))
	if w.Code != http.StatusOK || decode[lockLease](t, w).State != "released" {
		t.Fatalf("release: %d %s", w.Code, w.Body)
	}
	// Releasing again answers the same; renewing a released lease is 410.
	if w := h.lockCall("alice", "release", leaseJSON(a.LeaseID)); w.Code != http.StatusOK {
		t.Fatalf("second release: %d %s", w.Code, w.Body)
	}
	p = wantProblem(t, h.lockCall("alice", "renew", leaseJSON(a.LeaseID)), http.StatusGone)
	if !strings.Contains(p.Detail, "released") {
		t.Errorf("410 detail %q", p.Detail)
	}
	if info := h.inspect(t, "alice", "report", 0); info.Held {
		t.Fatalf("held after release: %+v", info)
	}
	// The next holder's fence is larger.
	if c := h.acquire(t, "alice", "r3", "report", 0); c.Fence <= a.Fence {
		t.Fatalf("fence %d after %d", c.Fence, a.Fence)
	}
}

func TestLocksAcquireRetry(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	a := h.acquire(t, "alice", "retry-1", "k", 0)

	// The same request id and input: the same lease, not a second one.
	w := h.lockCall("alice", "acquire", acquireJSON("retry-1", "jobs", "k", 30000, 0, 0))
	if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %v %s", w.Code, w.Header(), w.Body)
	}
	if r := decode[lockLease](t, w); r.LeaseID != a.LeaseID || r.Fence != a.Fence {
		t.Fatalf("retry answered %+v, want %+v", r, a)
	}
	// The id in the Idempotency-Key header is the same id.
	hdr := jsonHeader()
	hdr.Set("Idempotency-Key", `"retry-1"`)
	w = h.do(req{method: http.MethodPost, path: "/v1/locks/acquire", actor: "alice", header: hdr,
		body: `{"name":"jobs","key":"k","ttl_ms":30000}`})
	if w.Code != http.StatusOK || decode[lockLease](t, w).LeaseID != a.LeaseID {
		t.Fatalf("retry by header: %d %s", w.Code, w.Body)
	}
	// Other input under the id: 409.
	p := wantProblem(t, h.lockCall("alice", "acquire", acquireJSON("retry-1", "jobs", "other", 30000, 0, 0)), http.StatusConflict)
	if p.Detail != intent.ConflictMessage {
		t.Errorf("409 detail %q", p.Detail)
	}
	// Bob's id of the same name is his own.
	if b := h.acquire(t, "bob", "retry-1", "k", 0); b.LeaseID == a.LeaseID {
		t.Fatal("bob's retry id answered alice's lease")
	}
	// After the release a retry is told the lease ended.
	if w := h.lockCall("alice", "release", leaseJSON(a.LeaseID)); w.Code != http.StatusOK {
		t.Fatalf("release: %d %s", w.Code, w.Body)
	}
	wantProblem(t, h.lockCall("alice", "acquire", acquireJSON("retry-1", "jobs", "k", 30000, 0, 0)), http.StatusGone)
	// A 423 binds nothing: the same id may ask again and get the key.
	c := h.acquire(t, "alice", "hold-it", "busy", 0)
	wantProblem(t, h.lockCall("alice", "acquire", acquireJSON("later", "jobs", "busy", 30000, 0, 0)), http.StatusLocked)
	h.lockCall("alice", "release", leaseJSON(c.LeaseID))
	if d := h.acquire(t, "alice", "later", "busy", 0); d.Fence <= c.Fence {
		t.Fatalf("fence %d after %d", d.Fence, c.Fence)
	}
}

func TestLocksBadInput(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	long := strings.Repeat("é", lockservice.MaxKeyLen+1)
	cases := []struct {
		name, body string
		status     int
		field      string
	}{
		{"no request id", `{"name":"jobs","key":"k"}`, 400, "request_id"},
		{"request id with control", `{"request_id":"a\u0001","name":"jobs","key":"k"}`, 400, "request_id"},
		{"no name", `{"request_id":"r","key":"k"}`, 400, "name"},
		{"no key", `{"request_id":"r","name":"jobs"}`, 400, "key"},
		{"empty key", `{"request_id":"r","name":"jobs","key":""}`, 400, "key"},
		{"key too long", `{"request_id":"r","name":"jobs","key":"` + long + `"}`, 400, "key"},
		{"name with slash", `{"request_id":"r","name":"a/b","key":"k"}`, 400, "name"},
		{"name too long", `{"request_id":"r","name":"` + strings.Repeat("n", 65) + `","key":"k"}`, 400, "name"},
		{"ttl too short", `{"request_id":"r","name":"jobs","key":"k","ttl_ms":499}`, 400, "ttl_ms"},
		{"ttl too long", `{"request_id":"r","name":"jobs","key":"k","ttl_ms":3600001}`, 400, "ttl_ms"},
		{"ttl huge", `{"request_id":"r","name":"jobs","key":"k","ttl_ms":9223372036854775807}`, 400, "ttl_ms"},
		{"ttl fraction", `{"request_id":"r","name":"jobs","key":"k","ttl_ms":1000.5}`, 400, "ttl_ms"},
		{"wait negative", `{"request_id":"r","name":"jobs","key":"k","wait_ms":-1}`, 400, "wait_ms"},
		{"wait too long", `{"request_id":"r","name":"jobs","key":"k","wait_ms":60001}`, 400, "wait_ms"},
		{"limit negative", `{"request_id":"r","name":"jobs","key":"k","limit":-1}`, 400, "limit"},
		{"limit too large", `{"request_id":"r","name":"jobs","key":"k","limit":10001}`, 400, "limit"},
		{"unknown field", `{"request_id":"r","name":"jobs","key":"k","owner":"me"}`, 400, ""},
		{"wrong type", `{"request_id":"r","name":"jobs","key":5}`, 400, "key"},
		{"not json", `{"request_id":`, 400, ""},
		{"duplicate name", `{"request_id":"r","name":"jobs","name":"x","key":"k"}`, 400, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := wantProblem(t, h.lockCall("alice", "acquire", c.body), c.status)
			if c.field != "" && !p.hasField(c.field) {
				t.Errorf("problem %+v does not name %s", p, c.field)
			}
		})
	}
	t.Run("not an object", func(t *testing.T) {
		// The detail says what is wanted, never the decoder's words (a Go
		// type name, a jsontext error).
		for _, body := range []string{`[]`, `{"request_id":`, `{} {}`, ``} {
			p := wantProblem(t, h.lockCall("alice", "acquire", body), 400)
			if strings.Contains(p.Detail, "httpapi.") || strings.Contains(p.Detail, "json") {
				t.Errorf("body %q: detail %q shows the decoder", body, p.Detail)
			}
		}
	})
	t.Run("malformed inspect query", func(t *testing.T) {
		p := wantProblem(t, h.do(req{method: http.MethodGet, path: "/v1/locks/inspect?name=jobs&key=%zz", actor: "alice"}), 400)
		if p.Detail != "The query string is malformed." {
			t.Errorf("detail %q", p.Detail)
		}
	})
	t.Run("not json media type", func(t *testing.T) {
		wantProblem(t, h.do(req{method: http.MethodPost, path: "/v1/locks/acquire", actor: "alice",
			body: acquireJSON("r", "jobs", "k", 30000, 0, 0), header: http.Header{"Content-Type": {"text/plain"}}}), 415)
	})
	t.Run("too large", func(t *testing.T) {
		wantProblem(t, h.lockCall("alice", "acquire", `{"request_id":"r","name":"jobs","key":"`+strings.Repeat("k", 17<<10)+`"}`), 413)
	})
	t.Run("renew without lease id", func(t *testing.T) {
		p := wantProblem(t, h.lockCall("alice", "renew", `{}`), 400)
		if !p.hasField("lease_id") {
			t.Errorf("problem %+v", p)
		}
	})
	t.Run("inspect without key", func(t *testing.T) {
		p := wantProblem(t, h.do(req{method: http.MethodGet, path: "/v1/locks/inspect?name=jobs", actor: "alice"}), 400)
		if !p.hasField("key") {
			t.Errorf("problem %+v", p)
		}
	})
	t.Run("inspect bad limit", func(t *testing.T) {
		wantProblem(t, h.do(req{method: http.MethodGet, path: "/v1/locks/inspect?name=jobs&key=k&limit=x", actor: "alice"}), 400)
	})
	t.Run("wrong method", func(t *testing.T) {
		wantProblem(t, h.do(req{method: http.MethodGet, path: "/v1/locks/acquire", actor: "alice"}), 405)
	})
	// None of it took anything.
	if info := h.inspect(t, "alice", "k", 0); info.Held || info.Waiters != 0 {
		t.Fatalf("after bad input: %+v", info)
	}
}

// TestLocksKeysAreExact: keys that differ only by case, normalization, NUL
// or a separator are different keys, and the actor and name are part of
// the key.
func TestLocksKeysAreExact(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	keys := []string{"k", "K", "k ", "é", "e\u0301", "a\x00b", "a", "a\x00", "\x00b", "bob\x00jobs\x00k", "jobs\x00k"}
	for i, k := range keys {
		h.acquire(t, "alice", fmt.Sprint("exact-", i), k, 0)
	}
	// Each is held once, by alice only.
	for _, k := range keys {
		if info := h.inspect(t, "alice", k, 0); len(info.Holders) != 1 {
			t.Fatalf("key %q: %+v", k, info)
		}
		if info := h.inspect(t, "bob", k, 0); info.Held {
			t.Fatalf("bob sees alice's key %q: %+v", k, info)
		}
	}
	// Other names are other keys too.
	w := h.lockCall("alice", "acquire", acquireJSON("other-name", "jobs2", "k", 30000, 0, 0))
	if w.Code != http.StatusCreated {
		t.Fatalf("other name: %d %s", w.Code, w.Body)
	}
}

func TestLocksExpiryAndLateRenewal(t *testing.T) {
	t.Parallel()
	var expired testsignal.Changes
	h := newLockHarnessConfig(t, lockservice.Config{Observe: func(e lockservice.Event) {
		if e.Ended != "" {
			expired.Notify()
		}
	}})
	w := h.lockCall("alice", "acquire", acquireJSON("short", "jobs", "exp", 500, 0, 0))
	if w.Code != http.StatusCreated {
		t.Fatalf("acquire: %d %s", w.Code, w.Body)
	}
	a := decode[lockLease](t, w)
	// Nobody renews: the key frees by itself (the 500 ms TTL passes, on
	// purpose), which the service tells of.
	expired.Until(t, "the lease to expire", func() bool { return !h.inspect(t, "alice", "exp", 0).Held })
	p := wantProblem(t, h.lockCall("alice", "renew", leaseJSON(a.LeaseID)), http.StatusGone)
	if !strings.Contains(p.Detail, "expired") {
		t.Errorf("detail %q", p.Detail)
	}
	wantProblem(t, h.lockCall("alice", "release", leaseJSON(a.LeaseID)), http.StatusGone)
	if b := h.acquire(t, "alice", "after", "exp", 0); b.Fence <= a.Fence {
		t.Fatalf("fence %d after %d", b.Fence, a.Fence)
	}
}

func TestLocksWaiterGetsTheKey(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	a := h.acquire(t, "alice", "first", "q", 0)
	got := make(chan *httptest.ResponseRecorder, 1)
	go func() { got <- h.lockCall("alice", "acquire", acquireJSON("second", "jobs", "q", 30000, 60000, 0)) }()
	waitFor(t, func() bool { return h.inspect(t, "alice", "q", 0).Waiters == 1 })
	h.lockCall("alice", "release", leaseJSON(a.LeaseID))
	w := <-got
	if w.Code != http.StatusCreated {
		t.Fatalf("waiter: %d %s", w.Code, w.Body)
	}
	if b := decode[lockLease](t, w); b.Fence <= a.Fence {
		t.Fatalf("fence %d after %d", b.Fence, a.Fence)
	}
}

// TestLocksAbandonedWait: a caller that goes away while waiting leaves
// nothing behind: when the key frees, nobody holds it.
func TestLocksAbandonedWait(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	a := h.acquire(t, "alice", "first", "ab", 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/locks/acquire",
			strings.NewReader(acquireJSON("gone", "jobs", "ab", 30000, 60000, 0)))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+h.tokens["alice"])
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		done <- w.Code
	}()
	waitFor(t, func() bool { return h.inspect(t, "alice", "ab", 0).Waiters == 1 })
	cancel()
	<-done
	waitFor(t, func() bool { return h.inspect(t, "alice", "ab", 0).Waiters == 0 })
	h.lockCall("alice", "release", leaseJSON(a.LeaseID))
	if info := h.inspect(t, "alice", "ab", 0); info.Held {
		t.Fatalf("the abandoned acquire holds the key: %+v", info)
	}
	// Its request id is free: a retry asks afresh.
	h.acquire(t, "alice", "gone", "ab", 0)
}

func TestLocksSemaphore(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	var fences []int64
	for i := range 2 {
		w := h.lockCall("alice", "acquire", acquireJSON(fmt.Sprint("s", i), "jobs", "pool", 30000, 0, 2))
		if w.Code != http.StatusCreated {
			t.Fatalf("slot %d: %d %s", i, w.Code, w.Body)
		}
		l := decode[lockLease](t, w)
		if l.Limit != 2 {
			t.Fatalf("limit %d", l.Limit)
		}
		fences = append(fences, l.Fence)
	}
	wantProblem(t, h.lockCall("alice", "acquire", acquireJSON("s3", "jobs", "pool", 30000, 0, 2)), http.StatusLocked)
	// One key, one limit: another limit while it is held is refused.
	p := wantProblem(t, h.lockCall("alice", "acquire", acquireJSON("s4", "jobs", "pool", 30000, 0, 3)), http.StatusConflict)
	if !strings.Contains(p.Detail, "limit") {
		t.Errorf("409 detail %q", p.Detail)
	}
	// The lock of the same key is another key space.
	h.acquire(t, "alice", "lock", "pool", 0)
	if info := h.inspect(t, "alice", "pool", 2); len(info.Holders) != 2 || info.Limit != 2 {
		t.Fatalf("semaphore inspect %+v (fences %v)", info, fences)
	}
}

// TestLocksConcurrentRetries: many concurrent tries of one request id take
// one lease between them.
func TestLocksConcurrentRetries(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	const n = 16
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			w := h.lockCall("alice", "acquire", acquireJSON("same", "jobs", "conc", 30000, 1000, 0))
			if w.Code != http.StatusCreated && w.Code != http.StatusOK {
				t.Errorf("try: %d %s", w.Code, w.Body)
				return
			}
			ids <- decode[lockLease](t, w).LeaseID
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != 1 {
		t.Fatalf("%d leases from one request id", len(seen))
	}
}

// waitFor polls cond until it holds: for a state no event of the lock
// service tells of (how many acquires wait).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testsignal.Patience(t))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLocksTooMany: past the leases an actor may hold or wait for, an
// acquire is 429; other actors go on.
func TestLocksTooMany(t *testing.T) {
	t.Parallel()
	h := newLockHarnessConfig(t, lockservice.Config{MaxPerActor: 2})
	a := h.acquire(t, "alice", "m1", "m1", 0)
	h.acquire(t, "alice", "m2", "m2", 0)
	p := wantProblem(t, h.lockCall("alice", "acquire", acquireJSON("m3", "jobs", "m3", 30000, 0, 0)), http.StatusTooManyRequests)
	if !strings.Contains(p.Detail, "release some") {
		t.Errorf("429 detail %q", p.Detail)
	}
	h.acquire(t, "bob", "m3", "m3", 0)
	h.lockCall("alice", "release", leaseJSON(a.LeaseID))
	h.acquire(t, "alice", "m3", "m3", 0)
}

// TestLocksWaitersFIFO: acquires waiting on one server get the key in the
// order they came.
func TestLocksWaitersFIFO(t *testing.T) {
	t.Parallel()
	h := newLockHarness(t)
	first := h.acquire(t, "alice", "fifo-0", "fifo", 0)
	const n = 6
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			w := h.lockCall("alice", "acquire", acquireJSON(fmt.Sprint("fifo-", i), "jobs", "fifo", 30000, 60000, 0))
			if w.Code != http.StatusCreated {
				t.Errorf("waiter %d: %d %s", i, w.Code, w.Body)
				return
			}
			l := decode[lockLease](t, w)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			h.lockCall("alice", "release", leaseJSON(l.LeaseID))
		})
		// The next comes only once this one waits.
		waitFor(t, func() bool { return h.inspect(t, "alice", "fifo", 0).Waiters == i })
	}
	h.lockCall("alice", "release", leaseJSON(first.LeaseID))
	wg.Wait()
	for i, got := range order {
		if got != i+1 {
			t.Fatalf("grant order %v, want 1..%d", order, n)
		}
	}
	if len(order) != n {
		t.Fatalf("%d of %d waiters got the key", len(order), n)
	}
}
