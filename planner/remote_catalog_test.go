package planner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"studio/generator"
	"studio/intent"
)

// The example catalogs of testdata/catalogs load, with their workflow
// found next to the file. Not parallel: it sets OPENAI_API_KEY.
func TestExampleCatalogs(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-example")
	for _, name := range []string{"openai.json", "local-openai.json", "comfyui.json"} {
		c, err := LoadCatalog(filepath.Join("..", "testdata", "catalogs", name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := generator.NewRegistry(c.Specs()...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	c, _ := LoadCatalog(filepath.Join("..", "testdata", "catalogs", "comfyui.json"))
	specs := c.Specs()
	if !filepath.IsAbs(specs[0].Workflow) && !strings.HasPrefix(specs[0].Workflow, "..") {
		t.Errorf("the workflow path %q is not resolved from the catalog's directory", specs[0].Workflow)
	}
	gens, _ := c.Generators(context.Background())
	if fmt.Sprint(gens) != "[{comfy comfyui 2 [] }]" {
		t.Errorf("generators = %v", gens)
	}

	t.Setenv("OPENAI_API_KEY", "")
	_, err := LoadCatalog(filepath.Join("..", "testdata", "catalogs", "openai.json"))
	if err == nil || !strings.Contains(err.Error(), `generators[0]: generator "gpt-image": api_key_env names OPENAI_API_KEY, which is not set`) ||
		!strings.Contains(err.Error(), "openai.json") || strings.Contains(err.Error(), "sk-example") {
		t.Fatalf("unset key: %v", err)
	}
}

func TestRemoteCatalogRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wf, err := os.ReadFile(filepath.Join("..", "testdata", "catalogs", "comfy", "txt2img.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wf.json"), wf, 0o600); err != nil {
		t.Fatal(err)
	}
	const comfy = `{"id":"comfy","kind":"comfyui","base_url":"http://127.0.0.1:8188","workflow":"wf.json","inputs":{"prompt":"6.inputs.text"},"output_node":"9"}`
	cases := []struct {
		name, gens, says string
	}{
		{"unknown member", `{"id":"gpt","kind":"openai","base_url":"http://x/v1","model":"m","modle":"m"}`, `the catalog has an unknown member "modle" in generators[0] (line 1, column 81)`},
		{"member of the other kind", `{"id":"gpt","kind":"openai","base_url":"http://x/v1","model":"m","output_node":"9"}`, `generators[0]: generator "gpt": output_node is not a member of kind "openai"`},
		{"bad template", `{"id":"gpt","kind":"openai","base_url":"http://x/v1","model":"m","prompt_template":"{{.Prompt"}`, `generators[0]: generator "gpt": prompt_template`},
		{"bad timeout", `{"id":"gpt","kind":"openai","base_url":"http://x/v1","model":"m","timeout":"soon"}`, `not a duration`},
		{"missing workflow", strings.Replace(comfy, "wf.json", "nope.json", 1), `generators[0]: generator "comfy": workflow: open ` + filepath.Join(dir, "nope.json")},
		{"missing node", strings.Replace(comfy, "6.inputs.text", "60.inputs.text", 1), `generators[0]: generator "comfy": inputs.prompt: workflow ` + filepath.Join(dir, "wf.json") + ` has no node "60"`},
		{"unset key", strings.Replace(comfy, `"output_node"`, `"api_key_env":"STUDIO_TEST_UNSET_KEY","output_node"`, 1), `STUDIO_TEST_UNSET_KEY, which is not set`},
	}
	for _, c := range cases {
		doc := `{"generators":[` + c.gens + `],"routes":{"auto":[` + fmt.Sprintf("%q", strings.Split(strings.Split(c.gens, `"id":"`)[1], `"`)[0]) + `]}}`
		p := filepath.Join(dir, "catalog.json")
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadCatalog(p)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want it to say %q", c.name, err, c.says)
		}
	}
}

func TestRemoteKindsParams(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{generator.KindOpenAI, generator.KindComfyUI} {
		if err := generator.ValidateParams(kind, []byte(`{"width":512,"height":768,"style":"ink","delay_ms":-5}`)); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
		err := generator.ValidateParams(kind, []byte(`{"width":4096}`))
		if fs := intent.ErrorFields(err); len(fs) != 1 || fs[0].Field != "params.width" {
			t.Errorf("%s width 4096: %v", kind, err)
		}
	}
}

// TestOpenAISizesAtPlanTime: a size the model does not take is a 422 when
// the batch is planned, naming the field and the sizes allowed; a catalog
// with "sizes": ["any"] takes it; the default size must be one the model
// takes; a size of one of the sizes given in the catalog plans.
func TestOpenAISizesAtPlanTime(t *testing.T) {
	t.Parallel()
	cat := func(extra string) *Static {
		t.Helper()
		c, err := ParseCatalog([]byte(`{"generators": [
			{"id": "sketch", "kind": "embedded"},
			{"id": "dalle", "kind": "openai", "base_url": "https://api.openai.com/v1", "model": "dall-e-3"` + extra + `}],
			"routes": {"auto": ["sketch", "dalle"]}}`))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	plan := func(c *Static, params string) error {
		in := input([]intent.FrameSet{{Collection: "c", Frames: frames(1)}}, []string{"auto"}, 1)
		in.Params = []byte(params)
		_, err := New(c).PlanGeneration(context.Background(), "local", in)
		return err
	}
	strict := cat("")
	for _, ok := range []string{`{}`, `{"width":1792,"height":1024}`, `{"width":1024}`} {
		if err := plan(strict, ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	err := plan(strict, `{"width":300,"height":200}`)
	fields := mustRefuse(t, err)
	if len(fields) != 1 || fields[0].Field != "params.width" ||
		!strings.Contains(fields[0].Message, `generator "dalle" takes only the sizes 1024x1024, 1792x1024, 1024x1792, not 300x200`) {
		t.Fatalf("300x200: %+v", fields)
	}
	if fields := mustRefuse(t, plan(strict, `{"height":512}`)); len(fields) != 1 || fields[0].Field != "params.height" {
		t.Fatalf("height only: %+v", fields)
	}
	if err := plan(cat(`, "sizes": ["any"]`), `{"width":300,"height":200}`); err != nil {
		t.Fatalf("sizes any: %v", err)
	}
	if err := plan(cat(`, "sizes": ["300x200", "1024x1024"]`), `{"width":300,"height":200}`); err != nil {
		t.Fatalf("sizes listed: %v", err)
	}
	for _, bad := range []string{`, "size": "512x512"`, `, "sizes": ["any", "1024x1024"]`, `, "sizes": ["big"]`, `, "size_mismatch": "ignore"`} {
		if _, err := ParseCatalog([]byte(`{"generators": [{"id": "dalle", "kind": "openai", "base_url": "https://api.openai.com/v1", "model": "dall-e-3"` + bad + `}], "routes": {"auto": ["dalle"]}}`)); err == nil {
			t.Errorf("%s: the catalog loaded", bad)
		}
	}
}
