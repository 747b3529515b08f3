package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"studio/httpapi"
	"studio/intent"
	"studio/planner"
)

// staticCatalogs answers GET /v1/catalog from a planner catalog, as
// cmd/studio does.
type staticCatalogs struct{ c *planner.Static }

func (s staticCatalogs) CatalogFor(ctx context.Context, actor string) (httpapi.Catalog, error) {
	gens, err := s.c.Generators(ctx)
	if err != nil {
		return httpapi.Catalog{}, err
	}
	out := httpapi.Catalog{Routes: s.c.Routes(), Subjects: s.c.SubjectsFor(actor), Channels: []string{intent.ChannelGallery}, MaxBatchTasks: 600}
	for _, g := range gens {
		out.Generators = append(out.Generators, httpapi.CatalogGenerator{ID: g.ID, Kind: g.Kind})
	}
	return out, nil
}

func TestCatalog(t *testing.T) {
	t.Parallel()
	h := newHarness(t, options{})
	cat, err := planner.ParseCatalog([]byte(`{
		"generators": [{"id": "sketch", "kind": "embedded"}, {"id": "mosaic", "kind": "embedded"}],
		"routes": {"auto": ["sketch", "mosaic"]},
		"subjects": [{"id": "knight", "public": true}, {"id": "ghost", "actors": ["alice"]}]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Generations: &intent.Service{}, Store: h.store, Catalogs: staticCatalogs{cat}})
	if err != nil {
		t.Fatal(err)
	}
	withCatalog := *h
	withCatalog.h = srv.Handler()

	if w := withCatalog.do(req{method: "GET", path: "/v1/catalog"}); w.Code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", w.Code)
	}
	for actor, subjects := range map[string][]string{"alice": {"knight", "ghost"}, "bob": {"knight"}} {
		w := withCatalog.do(req{method: "GET", path: "/v1/catalog", actor: actor})
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s", actor, w.Code, w.Body)
		}
		got := decode[httpapi.Catalog](t, w)
		if !slices.Equal(got.Subjects, subjects) {
			t.Errorf("%s may use %v; want %v", actor, got.Subjects, subjects)
		}
		if len(got.Generators) != 2 || got.Generators[0] != (httpapi.CatalogGenerator{ID: "sketch", Kind: "embedded"}) ||
			!slices.Equal(got.Routes["auto"], []string{"sketch", "mosaic"}) || got.MaxBatchTasks != 600 ||
			!slices.Equal(got.Channels, []string{"gallery"}) {
			t.Errorf("%s: catalog %+v", actor, got)
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
