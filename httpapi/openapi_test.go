package httpapi_test

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// TestOpenAPICoversRoutes walks the router and fails when a route and
// method it serves is missing from openapi.json, or when the document
// describes one the router does not serve.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	// With a Metrics handler, so that every optional route is served.
	h := newHarness(t, options{metrics: http.NotFoundHandler()})
	routes, ok := h.h.(chi.Routes)
	if !ok {
		t.Fatalf("the handler is a %T, not a chi router", h.h)
	}
	served := map[string]bool{}
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(served) < 11 {
		t.Fatalf("the walk found only %v", served)
	}

	w := h.do(req{method: "GET", path: "/openapi.json"})
	var doc struct {
		OpenAPI    string                               `json:"openapi"`
		Paths      map[string]map[string]jsontext.Value `json:"paths"`
		Components struct {
			Schemas         map[string]jsontext.Value `json:"schemas"`
			SecuritySchemes map[string]struct {
				Type   string `json:"type"`
				Scheme string `json:"scheme"`
			} `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths {
		for key := range item {
			switch key {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				documented[strings.ToUpper(key)+" "+path] = true
			}
		}
	}
	for r := range served {
		if !documented[r] {
			t.Errorf("%s is served but not in openapi.json", r)
		}
	}
	for r := range documented {
		if !served[r] {
			t.Errorf("%s is in openapi.json but not served", r)
		}
	}
	for _, s := range []string{"Batch", "Task", "Asset", "Problem", "GenerationRequest", "BatchList", "TaskList"} {
		if _, ok := doc.Components.Schemas[s]; !ok {
			t.Errorf("no schema %s", s)
		}
	}
	if b := doc.Components.SecuritySchemes["bearer"]; b.Type != "http" || b.Scheme != "bearer" {
		t.Errorf("bearer scheme %+v", b)
	}
	// Every $ref points at something the document has.
	var whole map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &whole); err != nil {
		t.Fatal(err)
	}
	refs := map[string]bool{}
	collectRefs(whole, refs)
	if len(refs) < 10 {
		t.Fatalf("only %d references found", len(refs))
	}
	for ref := range refs {
		if _, err := resolve(whole, ref); err != nil {
			t.Errorf("$ref %s: %v", ref, err)
		}
	}
	// Every operation has a unique operationId, declares each parameter of
	// its path template, and says what its success answer is.
	ids := map[string]bool{}
	for path, item := range whole["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			op := op.(map[string]any)
			id, _ := op["operationId"].(string)
			if id == "" || ids[id] {
				t.Errorf("%s %s: operationId %q missing or repeated", method, path, id)
			}
			ids[id] = true
			declared := map[string]bool{}
			params, _ := op["parameters"].([]any)
			for _, p := range params {
				p := p.(map[string]any)
				if ref, ok := p["$ref"].(string); ok {
					v, err := resolve(whole, ref)
					if err != nil {
						continue // reported above
					}
					p = v.(map[string]any)
				}
				if p["in"] == "path" {
					declared[p["name"].(string)] = true
				}
			}
			for _, m := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(path, -1) {
				if !declared[m[1]] {
					t.Errorf("%s %s: path parameter %s is not declared", method, path, m[1])
				}
			}
			responses, _ := op["responses"].(map[string]any)
			if !slices.ContainsFunc([]string{"200", "201", "204"}, func(c string) bool { return responses[c] != nil }) {
				t.Errorf("%s %s: no success answer", method, path)
			}
		}
	}
}

// collectRefs gathers every "$ref" value of a decoded JSON document.
func collectRefs(v any, refs map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok && k == "$ref" {
				refs[s] = true
			}
			collectRefs(e, refs)
		}
	case []any:
		for _, e := range v {
			collectRefs(e, refs)
		}
	}
}

// resolve follows a local JSON pointer ("#/components/schemas/Batch").
func resolve(doc map[string]any, ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("not a local reference")
	}
	var cur any = doc
	for _, part := range strings.Split(ref[2:], "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is not an object", part)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("no %s", part)
		}
	}
	return cur, nil
}
