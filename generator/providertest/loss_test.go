package providertest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestComfyUILosses: a prompt_id that is not a lowercase UUID is refused
// with invalid_prompt_id; Restart loses the queue and the history;
// DeleteOutputs makes /view answer 404 for an image the history names;
// POST /history {"delete"} drops an entry; SetDown answers nothing.
func TestComfyUILosses(t *testing.T) {
	f := NewComfyUI()
	defer f.Server.Close()
	workflow, err := os.ReadFile("../../testdata/catalogs/comfy/txt2img.json")
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(f.BaseURL()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	prompt := func(id string) (int, string) {
		return post("/prompt", `{"prompt": `+string(workflow)+`, "prompt_id": "`+id+`"}`)
	}
	for _, bad := range []string{"task-1", "01920000-0000-7000-8000-0000000000A1", "{01920000-0000-7000-8000-0000000000a1}"} {
		if code, body := prompt(bad); code != 400 || !strings.Contains(body, `"invalid_prompt_id"`) {
			t.Fatalf("prompt_id %q: %d %s", bad, code, body)
		}
	}
	const id = "01920000-0000-7000-8000-0000000000b1"
	if code, _ := prompt(id); code != 200 {
		t.Fatalf("a UUID prompt_id: %d", code)
	}
	f.Restart()
	if len(f.Running()) != 0 || f.ImageOf(id) != nil {
		t.Fatal("Restart kept the queue or the history")
	}
	prompt(id)
	img := f.ImageOf(id)
	if img == nil {
		t.Fatal("the prompt did not run")
	}
	var h map[string]struct {
		Outputs map[string]struct {
			Images []struct{ Filename string } `json:"images"`
		} `json:"outputs"`
	}
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := http.Get(f.BaseURL() + path)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := get("/history/" + id)
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	name := h[id].Outputs["9"].Images[0].Filename
	if resp := get("/view?filename=" + name); resp.StatusCode != 200 {
		t.Fatalf("view before DeleteOutputs: %d", resp.StatusCode)
	}
	f.DeleteOutputs()
	if resp := get("/view?filename=" + name); resp.StatusCode != 404 {
		t.Fatalf("view after DeleteOutputs: %d", resp.StatusCode)
	}
	if code, _ := post("/history", `{"delete": ["`+id+`"]}`); code != 200 || f.ImageOf(id) != nil {
		t.Fatalf("POST /history delete: %d", code)
	}
	if resp := get("/system_stats"); resp.StatusCode != 200 {
		t.Fatalf("system_stats: %d", resp.StatusCode)
	}
	f.SetDown(true)
	if _, err := http.Get(f.BaseURL() + "/system_stats"); err == nil {
		t.Fatal("a server that is down answered")
	}
}

// TestOpenAIURLs: data[0].url downloads once; FailDownloads scripts the
// file host's next answers; ExpireURLs makes every URL so far answer
// 403; /v1/models lists models; SetDown answers nothing.
func TestOpenAIURLs(t *testing.T) {
	f := NewOpenAI("")
	defer f.Server.Close()
	f.AnswerURLs(true)
	generate := func() string {
		t.Helper()
		resp, err := http.Post(f.BaseURL()+"/images/generations", "application/json", bytes.NewReader([]byte(`{"model":"dall-e-3","prompt":"a cat","size":"32x32"}`)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Data []struct{ URL string } `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&out)
		return out.Data[0].URL
	}
	status := func(url string) int {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	u := generate()
	f.FailDownloads(502)
	if a, b := status(u), status(u); a != 502 || b != 200 {
		t.Fatalf("downloads: %d then %d; want 502 then 200", a, b)
	}
	f.ExpireURLs()
	if s := status(u); s != 403 {
		t.Fatalf("an expired URL: %d", s)
	}
	if s := status(generate()); s != 200 || f.Downloads() != 4 {
		t.Fatalf("a new URL: %d; downloads %d", s, f.Downloads())
	}
	if s := status(f.BaseURL() + "/models"); s != 200 {
		t.Fatalf("models: %d", s)
	}
	f.SetDown(true)
	if _, err := http.Get(f.BaseURL() + "/models"); err == nil {
		t.Fatal("a server that is down answered")
	}
}
