package httpapi_test

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"studio/httpapi"
	"studio/lockservice"
)

// TestV1AuthenticatesFirst: every /v1 request is authenticated before its
// method is looked at, made-up methods included; a 405 always carries
// Allow; a made-up method on a path nothing serves is a 404.
func TestV1AuthenticatesFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	for _, m := range []string{"FOO", "DELETE", "PROPFIND", "GET"} {
		for _, p := range []string{"/v1/batches", "/v1/generations", "/v1/nope", "/v1"} {
			w := h.do(req{method: m, path: p})
			wantProblem(t, w, http.StatusUnauthorized)
			if w.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s: 401 without WWW-Authenticate", m, p)
			}
		}
	}
	tests := []struct {
		method, path string
		actor        string
		status       int
		allow        []string
	}{
		{"FOO", "/v1/batches", "alice", 405, []string{"GET", "HEAD"}},
		{"FOO", "/v1/generations", "alice", 405, []string{"POST"}},
		{"FOO", "/v1/batches/x/cancel", "alice", 405, []string{"POST"}},
		{"FOO", "/v1/nope", "alice", 404, nil},
		{"FOO", "/nope", "", 404, nil},
		{"FOO", "/healthz", "", 405, []string{"GET", "HEAD"}},
		{"DELETE", "/healthz", "", 405, []string{"GET", "HEAD"}},
		{"PUT", "/v1/batches", "alice", 405, []string{"GET", "HEAD"}},
		{"HEAD", "/v1/generations", "alice", 405, []string{"POST"}},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			w := h.do(req{method: tc.method, path: tc.path, actor: tc.actor})
			if tc.method == "HEAD" {
				if w.Code != tc.status {
					t.Fatalf("status %d, want %d", w.Code, tc.status)
				}
			} else {
				wantProblem(t, w, tc.status)
			}
			if got := w.Header().Values("Allow"); !slices.Equal(got, tc.allow) {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
		})
	}
}

// TestHeadWhereverGet: HEAD answers as GET does, with no body: the same
// status, type and length, and for asset content the same ETag.
func TestHeadWhereverGet(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "studio_up 1\n")
	})})
	b := h.create("alice", "req-1", 2, 1)
	a := h.addAsset("alice", []byte("\x89PNG\r\n\x1a\n pretend image bytes"))
	for _, tc := range []struct{ path, actor string }{
		{"/healthz", ""}, {"/readyz", ""}, {"/openapi.json", ""}, {"/metrics", ""},
		{"/v1/batches", "alice"}, {"/v1/batches/" + b.ID, "alice"}, {"/v1/batches/" + b.ID + "/tasks", "alice"},
		{"/v1/assets/" + a.ID, "alice"}, {"/v1/assets/" + a.ID + "/content", "alice"},
		{"/v1/batches/" + b.ID, "bob"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			get := h.do(req{method: "GET", path: tc.path, actor: tc.actor})
			head := h.do(req{method: "HEAD", path: tc.path, actor: tc.actor})
			if head.Code != get.Code {
				t.Fatalf("HEAD %d, GET %d", head.Code, get.Code)
			}
			if head.Body.Len() != 0 {
				t.Errorf("HEAD answered a body of %d bytes", head.Body.Len())
			}
			for _, k := range []string{"Content-Type", "ETag", "Cache-Control"} {
				if head.Header().Get(k) != get.Header().Get(k) {
					t.Errorf("%s: HEAD %q, GET %q", k, head.Header().Get(k), get.Header().Get(k))
				}
			}
			if cl := head.Header().Get("Content-Length"); cl != "" && cl != get.Header().Get("Content-Length") {
				t.Errorf("Content-Length: HEAD %q, GET %q", cl, get.Header().Get("Content-Length"))
			}
		})
	}
}

// TestCacheHeaders: authenticated JSON answers, errors included, are
// no-store; asset content is private with its ETag.
func TestCacheHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	b := h.create("alice", "req-1", 1, 1)
	a := h.addAsset("alice", []byte("\x89PNG\r\n\x1a\n pretend image bytes"))
	for _, tc := range []struct{ method, path, actor string }{
		{"GET", "/v1/batches", "alice"},
		{"GET", "/v1/batches/" + b.ID, "alice"},
		{"GET", "/v1/batches/" + b.ID, "bob"},
		{"GET", "/v1/assets/" + a.ID, "alice"},
		{"POST", "/v1/batches/" + b.ID + "/cancel", "alice"},
		{"GET", "/v1/batches", ""},
	} {
		w := h.do(req{method: tc.method, path: tc.path, actor: tc.actor})
		if got := w.Header().Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s as %q: %d with Cache-Control %q, want no-store", tc.method, tc.path, tc.actor, w.Code, got)
		}
	}
	w := h.post("alice", genBody("req-2", 1, 1))
	if w.Code != http.StatusCreated || w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("POST /v1/generations: %d with Cache-Control %q", w.Code, w.Header().Get("Cache-Control"))
	}
	w = h.do(req{method: "GET", path: "/v1/assets/" + a.ID + "/content", actor: "alice"})
	if cc := w.Header().Get("Cache-Control"); w.Code != 200 || !strings.HasPrefix(cc, "private") || w.Header().Get("ETag") != `"`+a.SHA256+`"` {
		t.Errorf("asset content: %d, Cache-Control %q, ETag %q", w.Code, cc, w.Header().Get("ETag"))
	}
}

// TestContentEncodingRefused: a body in an encoding studio does not decode
// is 415, not a parse error; identity is no encoding.
func TestContentEncodingRefused(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{})
	for _, enc := range []string{"gzip", "br", "deflate, gzip", "x-made-up"} {
		w := h.post("alice", genBody("req-enc", 1, 1), "Content-Encoding", enc)
		p := wantProblem(t, w, http.StatusUnsupportedMediaType)
		if !strings.Contains(p.Detail, "Content-Encoding") {
			t.Errorf("%s: detail %q does not name Content-Encoding", enc, p.Detail)
		}
		w = h.upload("alice", "image/png", []byte("\x89PNG\r\n\x1a\n"), "Content-Encoding", enc)
		wantProblem(t, w, http.StatusUnsupportedMediaType)
	}
	if w := h.post("alice", genBody("req-id", 1, 1), "Content-Encoding", "identity"); w.Code != http.StatusCreated {
		t.Errorf("identity: %d %s", w.Code, w.Body)
	}
}

// rawExchange sends raw bytes on a new connection to srv and returns what
// came back before the connection closed, or fails when nothing closes it
// within limit (the test's own guard, not a timing claim).
func rawExchange(t *testing.T, srv *httptest.Server, raw string, limit time.Duration) (resp *http.Response, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(limit))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to %q: %v", strings.SplitN(raw, "\r\n", 2)[0], err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, err = br.ReadByte()
	return resp, err == io.EOF
}

// TestUnsentBodyIsNotAwaited: requests that declare a body and never send
// it are answered without waiting for it (no token: 401; a route that
// reads no body: its answer), and their connections closed.
func TestUnsentBodyIsNotAwaited(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{BodyTimeout: time.Hour})
	srv := httptest.NewServer(h.h)
	t.Cleanup(srv.Close)
	tok := h.tokens["alice"]
	for _, tc := range []struct {
		raw    string
		status int
	}{
		{"POST /v1/generations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n", 401},
		{"POST /v1/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: 100000\r\n\r\n", 401},
		{"FOO /v1/batches HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", 401},
		{"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n", 200},
		{"GET /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\nContent-Length: 10\r\n\r\n", 200},
	} {
		resp, closed := rawExchange(t, srv, tc.raw, 10*time.Second)
		line := strings.SplitN(tc.raw, "\r\n", 2)[0]
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", line, resp.StatusCode, tc.status)
		}
		if !resp.Close || !closed {
			t.Errorf("%s: Connection: close %v, connection closed %v", line, resp.Close, closed)
		}
	}
}

// TestBodyDeadline: an authenticated request whose body stops arriving is
// answered 408 once the body deadline passes, and its connection closed.
func TestBodyDeadline(t *testing.T) {
	t.Parallel()
	h := newPubHarness(t, httpapi.Limits{BodyTimeout: 200 * time.Millisecond})
	srv := httptest.NewServer(h.h)
	t.Cleanup(srv.Close)
	tok := h.tokens["alice"]
	for _, raw := range []string{
		"POST /v1/generations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":",
		"POST /v1/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\nContent-Type: image/png\r\nContent-Length: 100000\r\n\r\n\x89PNG\r\n\x1a\n",
		"POST /v1/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n\x89PNG\r\n\x1a\n\r\n",
	} {
		resp, closed := rawExchange(t, srv, raw, 20*time.Second)
		line := strings.SplitN(raw, "\r\n", 2)[0]
		if resp.StatusCode != http.StatusRequestTimeout || !closed {
			t.Errorf("%s: %d (closed %v), want 408 and the connection closed", line, resp.StatusCode, closed)
		}
	}
	// A body that arrives in time is served as before.
	if w := h.post("alice", genBody("req-1", 1, 1)); w.Code != http.StatusCreated {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	// The lock routes read their bodies under the same deadline.
	lh, _, _ := newLockHarnessParts(t, lockservice.Config{}, httpapi.Limits{BodyTimeout: 200 * time.Millisecond})
	lsrv := httptest.NewServer(lh.h)
	t.Cleanup(lsrv.Close)
	for _, op := range []string{"acquire", "renew", "release"} {
		raw := "POST /v1/locks/" + op + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + lh.tokens["alice"] +
			"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"key\":"
		if resp, closed := rawExchange(t, lsrv, raw, 20*time.Second); resp.StatusCode != http.StatusRequestTimeout || !closed {
			t.Errorf("POST /v1/locks/%s: %d (closed %v), want 408 and the connection closed", op, resp.StatusCode, closed)
		}
	}
}

// TestSlowReaderIsCut: a client that asks for a large asset and never
// reads it does not hold the answer forever: once a write makes no
// progress for WriteStall the handler ends and the server closes the
// connection.
func TestSlowReaderIsCut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{limits: httpapi.Limits{WriteStall: 200 * time.Millisecond}})
	data := make([]byte, 32<<20)
	copy(data, "\x89PNG\r\n\x1a\n")
	a := h.addAsset("alice", data)
	srv := httptest.NewUnstartedServer(h.h)
	closed := make(chan struct{})
	var once sync.Once
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			once.Do(func() { close(closed) })
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(c, "GET /v1/assets/"+a.ID+"/content HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+h.tokens["alice"]+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read nothing; the server must give up on the answer and the
	// connection.
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the answer to a reader that reads nothing is still being written")
	}
	if !strings.Contains(h.logs.String(), `"route":"/v1/assets/{id}/content"`) {
		t.Fatal("the connection closed, but the request was not logged as ended")
	}
}

// TestCursorsAreSigned: a cursor minted by hand, with the format of the
// server's own and a real id, is 400; servers sharing a key (every
// instance on one database) accept each other's cursors; a server with
// another key refuses them.
func TestCursorsAreSigned(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	h := newHarness(t, options{cursorKey: key})
	var ids []string
	for i := range 4 {
		ids = append(ids, h.create("alice", fmt.Sprintf("req-%d", i), 1, 1).ID)
	}
	// ids are newest last; the list is newest first.
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"v":1,"scope":"batches","after":"` + ids[2] + `"}`))
	p := wantProblem(t, h.do(req{method: "GET", path: "/v1/batches?cursor=" + forged, actor: "alice"}), http.StatusBadRequest)
	if !p.hasField("cursor") {
		t.Errorf("problem %+v does not name the cursor", p)
	}
	w := h.do(req{method: "GET", path: "/v1/batches?limit=1", actor: "alice"})
	next := decode[batchList](t, w).NextCursor
	if next == nil {
		t.Fatalf("no next cursor: %s", w.Body)
	}
	// Another server on the same store and key: the cursor works there.
	twin, err := httpapi.New(httpapi.Config{Generations: h.gens, Store: h.store, CursorKey: key})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/batches?limit=1&cursor="+url.QueryEscape(*next), nil)
	r.Header.Set("Authorization", "Bearer "+h.tokens["alice"])
	rw := httptest.NewRecorder()
	twin.Handler().ServeHTTP(rw, r)
	if got := decode[batchList](t, rw); rw.Code != 200 || len(got.Items) != 1 || got.Items[0].ID != ids[2] {
		t.Fatalf("the twin server answered %d %s", rw.Code, rw.Body)
	}
	// A server with another key refuses it.
	stranger, err := httpapi.New(httpapi.Config{Generations: h.gens, Store: h.store, CursorKey: []byte("another key, another database...")})
	if err != nil {
		t.Fatal(err)
	}
	rw = httptest.NewRecorder()
	stranger.Handler().ServeHTTP(rw, r)
	wantProblem(t, rw, http.StatusBadRequest)
}
