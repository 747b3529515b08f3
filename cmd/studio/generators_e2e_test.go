package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"studio/generator"
	"studio/generator/providertest"
	"studio/intent"
	"studio/metrics/metricstest"
)

// The remote generators' process tests: the studio binary against the
// fake providers of generator/providertest, which run in the test process.

const (
	fakeKeyEnv = "STUDIO_TEST_OPENAI_KEY"
	fakeKey    = "sk-e2e-0123456789-SECRET-KEY-VALUE"
)

// remoteCatalog writes a catalog with the openai generator "gpt" and the
// comfyui generator "comfy" on the fakes, and the example workflow next
// to it; it answers the catalog's path.
func remoteCatalog(t *testing.T, oa *providertest.OpenAI, comfy *providertest.ComfyUI) string {
	t.Helper()
	dir := t.TempDir()
	wf, err := os.ReadFile(filepath.Join("..", "..", "testdata", "catalogs", "comfy", "txt2img.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "comfy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "comfy", "txt2img.json"), wf, 0o600); err != nil {
		t.Fatal(err)
	}
	cat := fmt.Sprintf(`{
  "generators": [
    {"id": "gpt", "kind": "openai", "base_url": %q, "model": "gpt-image-1",
     "api_key_env": %q, "timeout": "20s", "max_concurrency": 2, "sizes": ["any"]},
    {"id": "comfy", "kind": "comfyui", "base_url": %q, "workflow": "comfy/txt2img.json",
     "inputs": {"prompt": "6.inputs.text", "seed": "3.inputs.seed", "width": "5.inputs.width", "height": "5.inputs.height"},
     "output_node": "9", "poll_interval": "20ms", "timeout": "60s"}
  ],
  "routes": {"auto": ["gpt", "comfy"]}
}`, oa.BaseURL(), fakeKeyEnv, comfy.BaseURL())
	path := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(path, []byte(cat), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// content reads an asset's bytes through the API.
func (c *client) content(t *testing.T, assetID string) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", c.base+"/v1/assets/"+assetID+"/content", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET content of %s: %d, %v", assetID, resp.StatusCode, err)
	}
	return b
}

// TestRemoteGeneratorsBatch: one batch over both kinds succeeds, each
// asset holds the bytes the fake made for its task, ComfyUI saw one
// submission per task and OpenAI one call per task under the task id;
// then a 429 with Retry-After is retried and a 400 fails the task at once
// with the provider's message. The key is in no log, answer or database
// file, and /metrics counts the calls per generator.
func TestRemoteGeneratorsBatch(t *testing.T) {
	oa := providertest.NewOpenAI(fakeKey)
	defer oa.Server.Close()
	comfy := providertest.NewComfyUI()
	defer comfy.Server.Close()
	comfy.SetDelay(150 * time.Millisecond)
	t.Setenv(fakeKeyEnv, fakeKey)
	catalog := remoteCatalog(t, oa, comfy)

	f := newFarm(t, "--catalog", catalog, "--workers", "4", "--retry-base", "10ms")
	body := map[string]any{
		"request_id": "remote-1", "prompt": "a knight in the rain",
		"sets":       []map[string]any{{"collection": "walk", "frames": []string{"f01", "f02"}}},
		"candidates": 2, "seed": 7, "params": map[string]any{"width": 64, "height": 48},
	}
	b := f.generate(f.c, body)
	if b.TaskCount != 8 {
		t.Fatalf("task count %d, want 2 frames x 2 generators x 2 candidates", b.TaskCount)
	}
	b = f.waitBatch(f.c, b.ID, 120*time.Second, "the batch to end", batchEnded)
	tasks := f.tasks(f.c, b.ID)
	if b.State != intent.StateSucceeded {
		t.Fatalf("batch %+v; tasks %+v", b, tasks)
	}
	assets := f.checkAssets("local", tasks)
	for _, tk := range tasks {
		got := f.c.content(t, *tk.AssetID)
		var want []byte
		switch tk.Generator {
		case "gpt":
			want = providertest.OpenAIImage("gpt-image-1", "a knight in the rain", "64x48")
		case "comfy":
			want = comfy.ImageOf(tk.ID)
			seven := int64(7)
			seed := generator.TaskSeed(generator.Job{Key: tk.ID, Seed: &seven, Collection: tk.Collection, Frame: tk.Frame, Candidate: tk.Candidate})
			if !bytes.Equal(want, providertest.ComfyImage("a knight in the rain", seed, 64, 48)) {
				t.Fatalf("task %s: the fake did not get the prompt, the task's seed and the size", tk.ID)
			}
		}
		if len(want) == 0 || !bytes.Equal(got, want) || tk.Attempts != 1 {
			t.Fatalf("task %s (%s): asset of %d bytes, want the fake's %d bytes; attempts %d", tk.ID, tk.Generator, len(got), len(want), tk.Attempts)
		}
		if a := assets[tk.ID]; a.Width != 64 || a.Height != 48 || a.ContentType != "image/png" {
			t.Fatalf("asset %+v", a)
		}
	}
	subs := comfy.Submissions()
	keys := map[string]int{}
	for _, c := range oa.Calls() {
		keys[c.IdempotencyKey]++
		if c.Auth != "Bearer "+fakeKey {
			t.Fatalf("OpenAI call without the key: %+v", c)
		}
	}
	for _, tk := range tasks {
		n := map[string]int{"gpt": keys[tk.ID], "comfy": subs[tk.ID]}[tk.Generator]
		if n != 1 {
			t.Fatalf("task %s (%s) reached its provider %d times", tk.ID, tk.Generator, n)
		}
	}
	if len(subs) != 4 || comfy.Posts() != 4 || len(oa.Calls()) != 4 {
		t.Fatalf("comfy submissions %v (%d posts), openai calls %d", subs, comfy.Posts(), len(oa.Calls()))
	}

	// 429 with Retry-After: retried after it, and succeeds.
	oa.Fail(providertest.Reply{Status: 429, RetryAfter: "1", Type: "requests", Code: "rate_limit_exceeded", Message: "Rate limit reached for images per minute."})
	one := func(id string) map[string]any {
		return map[string]any{"request_id": id, "prompt": "a knight", "providers": []string{"gpt"},
			"sets": []map[string]any{{"collection": "c", "frames": []string{"f01"}}}}
	}
	b = f.generate(f.c, one("remote-429"))
	b = f.waitBatch(f.c, b.ID, 60*time.Second, "the 429 batch to end", batchEnded)
	tk := f.tasks(f.c, b.ID)[0]
	if b.State != intent.StateSucceeded || tk.Attempts != 2 {
		t.Fatalf("after a 429: batch %s, task %+v", b.State, tk)
	}
	// 400: the task fails at once with the provider's message.
	oa.Fail(providertest.Reply{Status: 400, Type: "invalid_request_error", Code: "content_policy_violation", Message: "Your request was rejected as a result of our safety system."})
	b = f.generate(f.c, one("remote-400"))
	b = f.waitBatch(f.c, b.ID, 60*time.Second, "the 400 batch to end", batchEnded)
	tk = f.tasks(f.c, b.ID)[0]
	if b.State != intent.StateFailed || tk.Attempts != 1 || tk.Error == nil || !strings.Contains(*tk.Error, "rejected as a result of our safety system") || !strings.Contains(*tk.Error, `"gpt"`) {
		t.Fatalf("after a 400: batch %s, task %+v", b.State, tk)
	}
	// The text names its step once, then the request: "attempt 1:
	// generate: generator "gpt": POST /images/generations: ... answered 400".
	if !strings.HasPrefix(*tk.Error, `attempt 1: generate: generator "gpt": POST /images/generations: `) {
		t.Fatalf("the 400's text: %s", *tk.Error)
	}
	for _, step := range []string{"submit: ", "wait: ", "fetch: ", "generate: "} {
		if strings.Count(*tk.Error, step) > 1 {
			t.Fatalf("the text names %q twice: %s", step, *tk.Error)
		}
	}

	scrape := metricstest.Get(t, "http://"+f.api.Addr+"/metrics")
	if n := scrape.Value("studio_generator_calls_total", "generator", "gpt", "call", "generate"); n != 7 {
		t.Errorf("gpt generate calls = %v, want 7", n)
	}
	if n := scrape.Value("studio_generator_errors_total", "generator", "gpt", "class", "rate_limited"); n != 1 {
		t.Errorf("gpt rate_limited errors = %v, want 1", n)
	}
	if n := scrape.Value("studio_generator_calls_total", "generator", "comfy", "call", "submit"); n != 4 {
		t.Errorf("comfy submit calls = %v, want 4", n)
	}

	// The key is nowhere studio writes: logs, metrics, task errors, files.
	if strings.Contains(f.api.logs.String(), fakeKey) || strings.Contains(f.api.stdout.String(), fakeKey) {
		t.Fatal("the key is in the logs")
	}
	if !strings.Contains(f.api.logs.String(), `"api_key_env":"`+fakeKeyEnv+`"`) {
		t.Fatal("no log line names the remote generators at start")
	}
	resp, err := http.Get("http://" + f.api.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(raw, []byte(fakeKey)) || !bytes.Contains(raw, []byte("studio_generator_call_duration_seconds")) {
		t.Fatal("the metrics show the key, or have no generator calls")
	}
	filepath.Walk(f.data, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(fakeKey)) {
			t.Errorf("the key is in %s", p)
		}
		return nil
	})
}

// TestComfyWorkerKilled: a worker SIGKILLed while its ComfyUI prompts
// run is replaced, and the provider sees one submission per task:
//
//   - killed mid-wait, once it recorded the "submitted" step: the new
//     worker resumes waiting for the same prompt_ids;
//   - killed inside POST /prompt (the prompt queued, the answer never
//     read, no step recorded): the new worker submits again, finds the
//     prompt_id in ComfyUI's queue, and queues nothing.
func TestComfyWorkerKilled(t *testing.T) {
	for _, when := range []string{"mid-wait", "mid-submit"} {
		t.Run(when, func(t *testing.T) {
			oa := providertest.NewOpenAI(fakeKey)
			defer oa.Server.Close()
			comfy := providertest.NewComfyUI()
			defer comfy.Server.Close()
			comfy.Hold()
			t.Setenv(fakeKeyEnv, fakeKey)
			catalog := remoteCatalog(t, oa, comfy)

			f := newFarm(t, "--catalog", catalog)
			workerFlags := []string{"--catalog", catalog, "--concurrency", "4", "--lease-ttl", "2s", "--retry-base", "10ms"}
			w1 := f.worker(workerFlags...)
			var once sync.Once
			if when == "mid-submit" {
				comfy.OnSubmit(func(string) { once.Do(func() { w1.cmd.Process.Kill() }) })
			}
			b := f.generate(f.c, map[string]any{
				"request_id": "killed-" + when, "prompt": "a robot waving", "providers": []string{"comfy"},
				"sets": []map[string]any{{"collection": "wave", "frames": []string{"f01", "f02", "f03"}}},
			})
			if when == "mid-wait" {
				pollFor(t, 60*time.Second, "every task to record its submitted step", func() bool {
					var n int
					err := f.store.DB().QueryRow(`SELECT count(*) FROM tasks WHERE batch_id = ? AND step = 'submitted'`, b.ID).Scan(&n)
					return err == nil && n == 3
				})
				w1.signal(syscall.SIGKILL)
			}
			w1.wait(60 * time.Second)
			if when == "mid-submit" {
				var n int
				if err := f.store.DB().QueryRow(`SELECT count(*) FROM tasks WHERE batch_id = ? AND step = 'submitted'`, b.ID).Scan(&n); err != nil || n == 3 {
					t.Fatalf("%d tasks recorded their step (%v): the kill came too late to test a resubmission", n, err)
				}
			}
			queued := len(comfy.Running())
			if queued == 0 {
				t.Fatal("no prompt reached the fake before the kill")
			}

			f.worker(workerFlags...)
			pollFor(t, 60*time.Second, "the second worker to claim every task", func() bool {
				for _, tk := range f.tasks(f.c, b.ID) {
					if tk.Attempts < 2 {
						return false
					}
				}
				return true
			})
			comfy.Release()
			b = f.waitBatch(f.c, b.ID, 60*time.Second, "the batch to end", batchEnded)
			tasks := f.tasks(f.c, b.ID)
			if b.State != intent.StateSucceeded {
				t.Fatalf("batch %+v, tasks %+v", b, tasks)
			}
			subs := comfy.Submissions()
			for _, tk := range tasks {
				// At least two attempts: the second worker's, and more if
				// it lost its own lease on a loaded machine (a renewal
				// later than --lease-ttl) and took the task again; each
				// attempt still finds the one prompt.
				if subs[tk.ID] != 1 || tk.Attempts < 2 {
					t.Fatalf("task %s: %d submissions, %d attempts; want 1 submission and 2 or more attempts", tk.ID, subs[tk.ID], tk.Attempts)
				}
				if got := f.c.content(t, *tk.AssetID); !bytes.Equal(got, comfy.ImageOf(tk.ID)) {
					t.Fatalf("task %s: the asset is not the fake's image", tk.ID)
				}
			}
			if comfy.Posts() != 3 || len(subs) != 3 {
				t.Fatalf("posts %d, submissions %v; want 3 prompts, each once", comfy.Posts(), subs)
			}
			t.Logf("%s: %d of 3 prompts were queued when the worker died", when, queued)
		})
	}
}

// TestServeRefusesABadRemoteCatalog: serve and worker refuse to start on a
// catalog whose generator cannot be built (a key variable that is not
// set, a workflow that lacks a node the catalog names), and say which
// generator, what and in which file.
func TestServeRefusesABadRemoteCatalog(t *testing.T) {
	bin := studioBinary(t)
	oa := providertest.NewOpenAI(fakeKey)
	defer oa.Server.Close()
	comfy := providertest.NewComfyUI()
	defer comfy.Server.Close()
	catalog := remoteCatalog(t, oa, comfy)
	b, err := os.ReadFile(catalog)
	if err != nil {
		t.Fatal(err)
	}
	badNode := filepath.Join(filepath.Dir(catalog), "bad-node.json")
	if err := os.WriteFile(badNode, bytes.Replace(b, []byte(`"6.inputs.text"`), []byte(`"16.inputs.text"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		catalog, key string
		says         []string
	}{
		{catalog, "", []string{`generator "gpt": api_key_env names ` + fakeKeyEnv + `, which is not set`, "catalog.json"}},
		{badNode, fakeKey, []string{`generator "comfy": inputs.prompt: workflow`, `has no node "16"`, "bad-node.json"}},
	}
	for _, c := range cases {
		for _, mode := range []string{"serve", "worker"} {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			cmd := exec.CommandContext(ctx, bin, mode, "--data", t.TempDir(), "--catalog", c.catalog, "--addr", "127.0.0.1:0")
			if mode == "worker" {
				cmd = exec.CommandContext(ctx, bin, mode, "--data", t.TempDir(), "--catalog", c.catalog)
			}
			cmd.Env = append(os.Environ(), fakeKeyEnv+"="+c.key)
			out, err := cmd.CombinedOutput()
			hung := ctx.Err() != nil
			cancel()
			if err == nil || hung {
				t.Fatalf("%s on %s started (or hung): %v\n%s", mode, filepath.Base(c.catalog), err, out)
			}
			for _, want := range c.says {
				if !strings.Contains(string(out), want) {
					t.Fatalf("%s on %s: the error does not say %s:\n%s", mode, filepath.Base(c.catalog), want, out)
				}
			}
			if strings.Contains(string(out), fakeKey) {
				t.Fatalf("%s: the output shows the key", mode)
			}
		}
	}
}
