package httpapi_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"studio/httpapi"
	"studio/intent"
)

// actorCatalogs answers GET /v1/catalog with the catalog of each actor,
// and notes who asked.
type actorCatalogs struct {
	by    map[string]httpapi.Catalog
	asked chan string
}

func (c actorCatalogs) CatalogFor(_ context.Context, actor string) (httpapi.Catalog, error) {
	c.asked <- actor
	return c.by[actor], nil
}

// TestCatalog: GET /v1/catalog needs a token, asks the catalog for the
// token's actor and answers what it says, with empty lists as [] and {}
// (never null: clients iterate them); a server without a catalog answers
// 503. (What cmd/studio's
// catalog holds is TestCatalogView's.)
func TestCatalog(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	full := httpapi.Catalog{Generators: []httpapi.CatalogGenerator{{ID: "sketch", Kind: "embedded"}},
		Routes: map[string][]string{"auto": {"sketch"}}, Subjects: []string{"ghost"}, Channels: []string{"gallery"}, MaxBatchTasks: 7}
	cats := actorCatalogs{by: map[string]httpapi.Catalog{"alice": full, "bob": {}}, asked: make(chan string, 4)}
	srv, err := httpapi.New(httpapi.Config{Generations: &intent.Service{}, Store: h.store, Catalogs: cats})
	if err != nil {
		t.Fatal(err)
	}
	withCatalog := *h
	withCatalog.h = srv.Handler()

	if w := withCatalog.do(req{method: "GET", path: "/v1/catalog"}); w.Code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", w.Code)
	}
	w := withCatalog.do(req{method: "GET", path: "/v1/catalog", actor: "alice"})
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("alice: %d %s", w.Code, w.Body)
	}
	if who := <-cats.asked; who != "alice" {
		t.Fatalf("the catalog was asked for %q, want alice", who)
	}
	if got := decode[httpapi.Catalog](t, w); !reflect.DeepEqual(got, full) {
		t.Errorf("alice's catalog %+v, want %+v", got, full)
	}
	w = withCatalog.do(req{method: "GET", path: "/v1/catalog", actor: "bob"})
	if who := <-cats.asked; w.Code != http.StatusOK || who != "bob" {
		t.Fatalf("bob: %d (asked for %q) %s", w.Code, who, w.Body)
	}
	for _, want := range []string{`"generators":[]`, `"routes":{}`, `"subjects":[]`, `"channels":[]`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("an empty catalog %s lacks %s", w.Body, want)
		}
	}

	// A server built without a catalog says so.
	if w := h.do(req{method: "GET", path: "/v1/catalog", actor: "alice"}); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("no catalog: %d %s", w.Code, w.Body)
	}
}

// TestUIRoutes: with a UI handler, / and /ui/... reach it without a token;
// /v1 still needs one.
func TestUIRoutes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ui " + r.URL.Path)) })
	srv, err := httpapi.New(httpapi.Config{Generations: &intent.Service{}, Store: h.store, UI: ui})
	if err != nil {
		t.Fatal(err)
	}
	withUI := *h
	withUI.h = srv.Handler()
	for _, path := range []string{"/", "/ui/app.js"} {
		if w := withUI.do(req{method: "GET", path: path}); w.Code != 200 || w.Body.String() != "ui "+path {
			t.Errorf("GET %s: %d %q", path, w.Code, w.Body)
		}
	}
	if w := withUI.do(req{method: "GET", path: "/v1/batches"}); w.Code != http.StatusUnauthorized {
		t.Errorf("GET /v1/batches without a token: %d", w.Code)
	}
	if w := h.do(req{method: "GET", path: "/"}); w.Code != http.StatusNotFound {
		t.Errorf("GET / without a UI: %d", w.Code)
	}
}
