package providertest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"testing"
)

// TestComfyUIQueuesADuplicatePromptID: like ComfyUI (server.py
// post_prompt, execution.py PromptQueue), a prompt_id the fake already
// has is queued again as another item, and the history keeps the first
// run's entry until the second run finishes and replaces it.
func TestComfyUIQueuesADuplicatePromptID(t *testing.T) {
	f := NewComfyUI()
	defer f.Server.Close()
	workflow, err := os.ReadFile("../../testdata/catalogs/comfy/txt2img.json")
	if err != nil {
		t.Fatal(err)
	}
	post := func() {
		t.Helper()
		body := []byte(`{"prompt": ` + string(workflow) + `, "prompt_id": "01920000-0000-7000-8000-0000000000a1", "client_id": "test"}`)
		resp, err := http.Post(f.BaseURL()+"/prompt", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /prompt: %s", resp.Status)
		}
	}
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(f.BaseURL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	type history map[string]struct {
		Prompt []any `json:"prompt"`
	}
	type queue struct {
		Running [][]any `json:"queue_running"`
		Pending [][]any `json:"queue_pending"`
	}

	post() // runs at once: no delay, not held
	var h history
	get("/history/01920000-0000-7000-8000-0000000000a1", &h)
	if len(h["01920000-0000-7000-8000-0000000000a1"].Prompt) == 0 || h["01920000-0000-7000-8000-0000000000a1"].Prompt[0] != float64(1) {
		t.Fatalf("after the first run: history %v; want the entry of item number 1", h)
	}

	f.Hold()
	post()
	post()
	var q queue
	get("/queue", &q)
	if len(q.Running) != 1 || len(q.Pending) != 1 {
		t.Fatalf("queue %+v; want the prompt_id queued twice more (one running, one pending)", q)
	}
	h = history{}
	get("/history/01920000-0000-7000-8000-0000000000a1", &h)
	if h["01920000-0000-7000-8000-0000000000a1"].Prompt[0] != float64(1) {
		t.Fatalf("while queued again: history %v; want the first run's entry kept", h)
	}
	if extra, _ := q.Running[0][3].(map[string]any); extra["client_id"] != "test" {
		t.Fatalf("queue item's extra_data %v; want the posted client_id", q.Running[0][3])
	}
	if got := f.Running(); len(got) != 2 || got[0] != "01920000-0000-7000-8000-0000000000a1" || got[1] != "01920000-0000-7000-8000-0000000000a1" {
		t.Fatalf("Running %v", got)
	}

	f.Release()
	q = queue{}
	get("/queue", &q)
	h = history{}
	get("/history/01920000-0000-7000-8000-0000000000a1", &h)
	if len(q.Running)+len(q.Pending) != 0 || h["01920000-0000-7000-8000-0000000000a1"].Prompt[0] != float64(3) {
		t.Fatalf("after release: queue %+v, history %v; want an empty queue and the last run's entry", q, h)
	}
	if got := f.Submissions()["01920000-0000-7000-8000-0000000000a1"]; got != 3 || f.Posts() != 3 {
		t.Fatalf("submissions %d, posts %d; want 3", got, f.Posts())
	}
}
