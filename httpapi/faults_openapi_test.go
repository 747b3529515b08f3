package httpapi_test

import (
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json"

	"studio/blob"
	"studio/httpapi"
	"studio/intent"
	"studio/intent/intenttest"
	"studio/planner"
	"studio/store/sqlite/sqlitetest"
)

// faultDoc is what the fault tests read of the served OpenAPI document.
type faultDoc struct {
	whole map[string]any
}

// servedDoc fetches and decodes GET /openapi.json.
func servedDoc(t *testing.T, h *harness) faultDoc {
	t.Helper()
	w := h.do(req{method: "GET", path: "/openapi.json"})
	if w.Code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d", w.Code)
	}
	var d faultDoc
	if err := json.Unmarshal(w.Body.Bytes(), &d.whole); err != nil {
		t.Fatal(err)
	}
	return d
}

// response answers the resolved response object an operation documents
// for status, or nil.
func (d faultDoc) response(t *testing.T, method, route, status string) map[string]any {
	t.Helper()
	item, _ := d.whole["paths"].(map[string]any)[route].(map[string]any)
	op, _ := item[strings.ToLower(method)].(map[string]any)
	rs, _ := op["responses"].(map[string]any)
	r, _ := rs[status].(map[string]any)
	if r == nil {
		return nil
	}
	if ref, ok := r["$ref"].(string); ok {
		v, err := resolve(d.whole, ref)
		if err != nil {
			t.Fatalf("%s %s %s: %v", method, route, status, err)
		}
		r = v.(map[string]any)
	}
	return r
}

// checkFaultAnswer fails unless the operation documents status as a
// problem+json answer with a Retry-After header.
func (d faultDoc) checkFaultAnswer(t *testing.T, method, route, status string) {
	t.Helper()
	r := d.response(t, method, route, status)
	if r == nil {
		t.Errorf("%s %s: no %s answer documented", method, route, status)
		return
	}
	content, _ := r["content"].(map[string]any)
	if content["application/problem+json"] == nil {
		t.Errorf("%s %s %s: not documented as application/problem+json", method, route, status)
	}
	headers, _ := r["headers"].(map[string]any)
	h, _ := headers["Retry-After"].(map[string]any)
	if ref, ok := h["$ref"].(string); ok {
		v, err := resolve(d.whole, ref)
		if err != nil {
			t.Fatalf("%s %s %s Retry-After: %v", method, route, status, err)
		}
		h = v.(map[string]any)
	}
	if schema, _ := h["schema"].(map[string]any); schema["type"] != "integer" {
		t.Errorf("%s %s %s: no integer Retry-After header documented (%v)", method, route, status, h)
	}
}

// TestOpenAPIDocumentsFaults: every /v1 operation documents the 503 of a
// dependency fault, and every /v1 operation that writes the 507 of a full
// volume, each as problem+json with Retry-After.
func TestOpenAPIDocumentsFaults(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{metrics: http.NotFoundHandler()})
	d := servedDoc(t, h)
	n := 0
	for route, item := range d.whole["paths"].(map[string]any) {
		if !strings.HasPrefix(route, "/v1/") {
			continue
		}
		for method := range item.(map[string]any) {
			method = strings.ToUpper(method)
			n++
			d.checkFaultAnswer(t, method, route, "503")
			if method != http.MethodGet {
				d.checkFaultAnswer(t, method, route, "507")
			} else if d.response(t, method, route, "507") != nil {
				t.Errorf("%s %s documents 507, which only a write answers", method, route)
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d /v1 operations found", n)
	}
	d.checkFaultAnswer(t, "GET", "/readyz", "503")
}

// TestFaultAnswersAreDocumented causes a real fault (another connection
// holds SQLite's write lock, as a backup tool or a shell left in a
// transaction would) and sends every kind of write the API has: each
// answers 503 with Retry-After, and the served document lists that answer
// for the route that gave it.
func TestFaultAnswersAreDocumented(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	var mu sync.Mutex
	routes := map[string]string{} // path sent -> route pattern
	fs, err := blob.NewFS(filepath.Join(t.TempDir(), "assets"))
	if err != nil {
		t.Fatal(err)
	}
	svc := &intent.Service{Store: h.store, Planner: planner.New(planner.EmbeddedCatalog()), Locker: &intenttest.KeyedMutex{},
		Publications: h.store, Channels: []string{intent.ChannelGallery}}
	h.server, err = httpapi.New(httpapi.Config{
		Generations:  svc,
		Store:        h.store,
		Blobs:        fs,
		Uploads:      &intent.Uploads{Store: h.store, Blobs: fsWriter{fs}, Locker: &intenttest.KeyedMutex{}},
		UploadDir:    t.TempDir(),
		Publications: svc,
		Logger:       slog.New(slog.NewJSONHandler(h.logs, nil)),
		Limits:       httpapi.Limits{DBWait: 100 * time.Millisecond},
		Observe: func(r httpapi.RequestRecord) {
			mu.Lock()
			defer mu.Unlock()
			routes[r.Method+" "+r.Route] = r.Fault
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.h = h.server.Handler()
	b := h.create("alice", "doc-faults-1", 2, 1)
	doc := servedDoc(t, h)

	sqlitetest.HoldWriteLock(t, h.store.Path())

	jsonHdr := http.Header{"Content-Type": {"application/json"}}
	writes := []struct {
		route string
		send  func() (int, http.Header)
	}{
		{"POST /v1/generations", func() (int, http.Header) {
			w := h.post("alice", genBody("doc-faults-2", 1, 1))
			return w.Code, w.Header()
		}},
		{"POST /v1/batches/{id}/cancel", func() (int, http.Header) {
			w := h.do(req{method: "POST", path: "/v1/batches/" + b.ID + "/cancel", actor: "alice"})
			return w.Code, w.Header()
		}},
		{"DELETE /v1/batches/{id}", func() (int, http.Header) {
			w := h.do(req{method: "DELETE", path: "/v1/batches/" + b.ID, actor: "alice"})
			return w.Code, w.Header()
		}},
		{"POST /v1/uploads", func() (int, http.Header) {
			w := h.upload("alice", "image/png", pngOf(t, 8, 8, 3))
			return w.Code, w.Header()
		}},
		{"POST /v1/publications", func() (int, http.Header) {
			w := h.do(req{method: "POST", path: "/v1/publications", actor: "alice", header: jsonHdr,
				body: `{"request_id":"doc-faults-3","batch_id":"` + b.ID + `","asset_ids":["00000000-0000-7000-8000-000000000000"],"channel":"gallery"}`})
			return w.Code, w.Header()
		}},
	}
	faulted := 0
	for _, wr := range writes {
		code, hdr := wr.send()
		mu.Lock()
		fault := routes[wr.route]
		mu.Unlock()
		method, route, _ := strings.Cut(wr.route, " ")
		switch {
		case code == http.StatusServiceUnavailable:
			if fault != "busy" || hdr.Get("Retry-After") != "2" {
				t.Errorf("%s: 503 with fault %q, Retry-After %q", wr.route, fault, hdr.Get("Retry-After"))
			}
			doc.checkFaultAnswer(t, method, route, "503")
			faulted++
		case code >= 500:
			t.Errorf("%s answered %d while the write lock was held", wr.route, code)
		default:
			// Refused before it wrote (a publication of an asset the
			// batch does not have is 422 after a read): no fault to see.
			t.Logf("%s answered %d without writing", wr.route, code)
		}
	}
	if faulted < 4 {
		t.Fatalf("only %d writes met the held lock", faulted)
	}
}
