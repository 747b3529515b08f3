package planner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"studio/generator"
)

func TestEmbeddedCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := EmbeddedCatalog()
	gens, err := c.Generators(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(gens); got != "[{sketch embedded 0 [] } {mosaic embedded 0 [] }]" {
		t.Errorf("generators = %s", got)
	}
	auto, ok, err := c.Route(ctx, "auto")
	if err != nil || !ok || !slices.Equal(auto, []string{"sketch", "mosaic"}) {
		t.Errorf("auto = %v, %v, %v", auto, ok, err)
	}
	if _, ok, _ := c.Route(ctx, "fast"); ok {
		t.Error("route fast exists")
	}
	vis, err := c.Visible(ctx, "anyone", []string{"knight", "robot", "cat", "ghost", ""})
	if err != nil || fmt.Sprint(vis) != "[true true true false false]" {
		t.Errorf("visible = %v, %v", vis, err)
	}
	if _, err := generator.NewRegistry(c.Specs()...); err != nil {
		t.Errorf("the embedded catalog's generators cannot be built: %v", err)
	}
}

func TestLoadCatalogExample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := LoadCatalog(filepath.Join("testdata", "catalog-example.json"))
	if err != nil {
		t.Fatal(err)
	}
	gens, _ := c.Generators(ctx)
	if got := fmt.Sprint(gens); got != "[{sketch embedded 8 [] } {mosaic embedded 0 [] }]" {
		t.Errorf("generators = %s", got)
	}
	for actor, want := range map[string]string{"alice": "[true true]", "bob": "[true false]", "": "[true false]"} {
		vis, err := c.Visible(ctx, actor, []string{"knight", "ghost"})
		if err != nil || fmt.Sprint(vis) != want {
			t.Errorf("visible to %q = %v, %v; want %s", actor, vis, err, want)
		}
	}
	if got := fmt.Sprint(c.Subjects()); got != "[{knight true []} {ghost false [alice]}]" {
		t.Errorf("subjects = %s", got)
	}

	// Answers are copies: a caller cannot change the catalog.
	gens[0].ID = "changed"
	auto, _, _ := c.Route(ctx, "auto")
	auto[0] = "changed"
	c.Subjects()[1].Actors[0] = "mallory"
	again, _ := c.Generators(ctx)
	auto2, _, _ := c.Route(ctx, "auto")
	vis, _ := c.Visible(ctx, "mallory", []string{"ghost"})
	if again[0].ID != "sketch" || auto2[0] != "sketch" || vis[0] {
		t.Error("a caller changed the catalog through an answer")
	}
}

func TestParseCatalogRefuses(t *testing.T) {
	t.Parallel()
	const gens = `"generators":[{"id":"sketch","kind":"embedded"},{"id":"mosaic","kind":"embedded"}]`
	const auto = `"routes":{"auto":["sketch","mosaic"]}`
	cases := []struct {
		name, doc, want string
	}{
		{"not json", `{`, "the catalog is not valid JSON (line 1, column 2): it ends too early"},
		{"trailing data", `{` + gens + `,` + auto + `} {}`, "the catalog is not valid JSON (line 1, column 124)"},
		{"unknown top-level member", `{` + gens + `,` + auto + `,"extra":1}`, `"extra"`},
		{"unknown generator member", `{"generators":[{"id":"sketch","kind":"embedded","speed":3}],"routes":{"auto":["sketch"]}}`, `"speed"`},
		{"member in the wrong case", `{"generators":[{"ID":"sketch","kind":"embedded"}],"routes":{"auto":["sketch"]}}`, `"ID"`},
		{"duplicate member", `{` + gens + `,` + gens + `,` + auto + `}`, `the name "generators" appears twice`},
		{"no generators", `{"generators":[],"routes":{"auto":[]}}`, "at least one"},
		{"unknown kind", `{"generators":[{"id":"sketch","kind":"remote"}],"routes":{"auto":["sketch"]}}`, `generators[0]: generator "sketch": unknown kind "remote"`},
		{"missing kind", `{"generators":[{"id":"sketch"}],"routes":{"auto":["sketch"]}}`, "generators[0]: kind is required"},
		{"unknown embedded id", `{"generators":[{"id":"oil","kind":"embedded"}],"routes":{"auto":["oil"]}}`, `no embedded generator`},
		{"missing id", `{"generators":[{"kind":"embedded"}],"routes":{"auto":[]}}`, "generators[0]: id is required"},
		{"duplicate id", `{"generators":[{"id":"sketch","kind":"embedded"},{"id":"sketch","kind":"embedded"}],"routes":{"auto":["sketch"]}}`, `generators[1]: duplicate id "sketch"`},
		{"max_concurrency 0", `{"generators":[{"id":"sketch","kind":"embedded","max_concurrency":0}],"routes":{"auto":["sketch"]}}`, "max_concurrency must be at least 1"},
		{"max_concurrency not an integer", `{"generators":[{"id":"sketch","kind":"embedded","max_concurrency":1.5}],"routes":{"auto":["sketch"]}}`, "generators[0].max_concurrency cannot be 1.5: it takes an integer"},
		{"route to a missing generator", `{` + gens + `,"routes":{"auto":["sketch","oil"]}}`, `routes["auto"][1]: no generator "oil" in the catalog`},
		{"route lists a generator twice", `{` + gens + `,"routes":{"auto":["sketch","sketch"]}}`, `routes["auto"][1]: generator "sketch" listed twice`},
		{"empty route", `{` + gens + `,"routes":{"auto":[]}}`, `routes["auto"]: lists no generators`},
		{"route named like a generator", `{` + gens + `,"routes":{"auto":["sketch"],"mosaic":["sketch"]}}`, "share its name"},
		{"no auto route", `{` + gens + `,"routes":{"fast":["sketch"]}}`, `the route "auto" is required`},
		{"no routes", `{` + gens + `}`, `the route "auto" is required`},
		{"subject neither public nor private", `{` + gens + `,` + auto + `,"subjects":[{"id":"ghost"}]}`, `subjects[0]: give "public": true or a list of "actors"`},
		{"subject public false", `{` + gens + `,` + auto + `,"subjects":[{"id":"ghost","public":false}]}`, `subjects[0]: give`},
		{"subject both", `{` + gens + `,` + auto + `,"subjects":[{"id":"ghost","public":true,"actors":["a"]}]}`, "a public subject lists no actors"},
		{"subject duplicate", `{` + gens + `,` + auto + `,"subjects":[{"id":"cat","public":true},{"id":"cat","public":true}]}`, `subjects[1]: duplicate id "cat"`},
		{"subject empty actor", `{` + gens + `,` + auto + `,"subjects":[{"id":"ghost","actors":[""]}]}`, "an actor name is empty"},
		{"subject unknown member", `{` + gens + `,` + auto + `,"subjects":[{"id":"ghost","actors":["a"],"owner":"a"}]}`, `"owner"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseCatalog([]byte(c.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestParseCatalogListsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := ParseCatalog([]byte(`{"generators":[{"id":"a","kind":"x"},{"id":"a","kind":"embedded"}],"routes":{"auto":["b"]},"subjects":[{"id":"s"}]}`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"generators[0]", "generators[1]", `routes["auto"][0]`, "subjects[0]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestLoadCatalogFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := LoadCatalog(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "load catalog") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"generators":[{"id":"sketch","kind":"nope"}],"routes":{"auto":["sketch"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCatalog(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `unknown kind "nope"`) {
		t.Errorf("bad file: %v", err)
	}
}
