package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"studio/generator/providertest"
	"studio/intent"
	"studio/metrics/metricstest"
)

// The provider-loss process tests: `studio serve` against the fakes, each
// with one failure injected after the paid call, asserting the paid calls
// each task made (the fake's own count and the task's generation_calls)
// and that the batch still succeeds.

// lossFarm starts the fakes and `studio serve` with workers on them.
func lossFarm(t *testing.T) (*farm, *providertest.OpenAI, *providertest.ComfyUI) {
	t.Helper()
	oa := providertest.NewOpenAI(fakeKey)
	t.Cleanup(oa.Server.Close)
	comfy := providertest.NewComfyUI()
	t.Cleanup(comfy.Server.Close)
	t.Setenv(fakeKeyEnv, fakeKey)
	f := newFarm(t, "--catalog", remoteCatalog(t, oa, comfy), "--workers", "4", "--retry-base", "10ms")
	return f, oa, comfy
}

// oneGenerator is a batch of n frames on one generator.
func oneGenerator(id, gen string, n int) map[string]any {
	frames := make([]string, n)
	for i := range frames {
		frames[i] = "f0" + string(rune('1'+i))
	}
	return map[string]any{"request_id": id, "prompt": "a cat on a roof", "providers": []string{gen},
		"sets": []map[string]any{{"collection": "c", "frames": frames}}, "params": map[string]any{"width": 32, "height": 32}}
}

// succeeded waits for the batch to end, checks it succeeded with every
// asset stored, and answers its tasks.
func (f *farm) succeeded(id string) []taskAnswer {
	f.t.Helper()
	b := f.waitBatch(f.c, id, 120*time.Second, "the batch to end", batchEnded)
	tasks := f.tasks(f.c, id)
	if b.State != intent.StateSucceeded {
		f.t.Fatalf("batch %s; tasks %+v", b.State, tasks)
	}
	f.checkAssets("local", tasks)
	return tasks
}

// TestComfyLostPromptIsSubmittedAgain: ComfyUI restarts while studio
// waits for its prompts (queue and history lost). Each task goes back to
// its submission under the same prompt_id, says so in its history, and
// succeeds: two POST /prompt per task, in the attempt that found the loss.
// Before, the recorded step stayed "submitted" and every later attempt
// waited for a prompt that no longer existed, until the task failed.
func TestComfyLostPromptIsSubmittedAgain(t *testing.T) {
	f, _, comfy := lossFarm(t)
	comfy.Hold()
	b := f.generate(f.c, oneGenerator("lost-prompt", "comfy", 3))
	pollFor(t, 60*time.Second, "every task to record its submitted step", func() bool {
		var n int
		err := f.store.DB().QueryRow(`SELECT count(*) FROM tasks WHERE batch_id = ? AND step = 'submitted'`, b.ID).Scan(&n)
		return err == nil && n == 3
	})
	comfy.Restart()
	comfy.Release()
	tasks := f.succeeded(b.ID)
	subs := comfy.Submissions()
	for _, tk := range tasks {
		if subs[tk.ID] != 2 || tk.GenerationCalls != 2 || tk.Attempts != 1 {
			t.Fatalf("task %s: %d submissions, generation_calls %d, attempts %d; want 2, 2, 1", tk.ID, subs[tk.ID], tk.GenerationCalls, tk.Attempts)
		}
		if len(tk.History) != 1 || !strings.Contains(tk.History[0], "submitted again under the same prompt_id") {
			t.Fatalf("task %s: history %q", tk.ID, tk.History)
		}
		if got := f.c.content(t, *tk.AssetID); !bytes.Equal(got, comfy.ImageOf(tk.ID)) {
			t.Fatalf("task %s: the asset is not the fake's image", tk.ID)
		}
	}
	scrape := metricstest.Get(t, "http://"+f.api.Addr+"/metrics")
	if n := scrape.Value("studio_generator_discarded_total", "generator", "comfy", "reason", "lost"); n != 3 {
		t.Errorf("discarded lost = %v, want 3", n)
	}
	if n := scrape.Value("studio_generator_images_stored_total", "generator", "comfy"); n != 3 {
		t.Errorf("images stored = %v, want 3", n)
	}
	t.Logf("calls per task after a ComfyUI restart mid-wait: %d (1 lost, 1 stored)", tasks[0].GenerationCalls)
}

// TestComfyGoneOutputIsMadeAgain: /view answers 404 for a finished
// prompt's image (the output folder was emptied). The task deletes the
// prompt's history entry, submits it again under the same prompt_id, and
// succeeds with two POST /prompt, instead of fetching the missing file on
// every attempt.
func TestComfyGoneOutputIsMadeAgain(t *testing.T) {
	f, _, comfy := lossFarm(t)
	comfy.Fail("view", providertest.Reply{Status: 404})
	b := f.generate(f.c, oneGenerator("gone-output", "comfy", 1))
	tk := f.succeeded(b.ID)[0]
	if n := comfy.Submissions()[tk.ID]; n != 2 || tk.GenerationCalls != 2 || tk.Attempts != 1 {
		t.Fatalf("task: %d submissions, generation_calls %d, attempts %d; want 2, 2, 1", n, tk.GenerationCalls, tk.Attempts)
	}
	if len(tk.History) != 1 || !strings.Contains(tk.History[0], "is gone (404)") {
		t.Fatalf("history %q", tk.History)
	}
}

// TestOpenAIDownloadRetriedNotRegenerated: the image host fails the
// download twice (502). The URL is recorded before the download, so the
// retries download again: one generation call per task, three downloads.
// Before, each retry generated again (one paid call per attempt).
func TestOpenAIDownloadRetriedNotRegenerated(t *testing.T) {
	f, oa, _ := lossFarm(t)
	oa.AnswerURLs(true)
	oa.FailDownloads(502, 502)
	b := f.generate(f.c, oneGenerator("download-fails", "gpt", 1))
	tk := f.succeeded(b.ID)[0]
	if n := len(oa.Calls()); n != 1 || tk.GenerationCalls != 1 || oa.Downloads() != 3 || tk.Attempts != 3 {
		t.Fatalf("generate calls %d, generation_calls %d, downloads %d, attempts %d; want 1, 1, 3, 3", n, tk.GenerationCalls, oa.Downloads(), tk.Attempts)
	}
	if got, want := f.c.content(t, *tk.AssetID), providertest.OpenAIImage("gpt-image-1", "a cat on a roof", "32x32"); !bytes.Equal(got, want) {
		t.Fatal("the asset is not the fake's image")
	}
	t.Logf("calls per task after two failed downloads: %d (downloads: %d)", tk.GenerationCalls, oa.Downloads())
}

// TestOpenAIGoneOrExpiredURLIsMadeAgain: a URL its host refuses (403,
// a signature past its time) or one past the 60 minutes the API gives it
// leads back to the generation, in the same attempt: two calls, noted in
// the task's history. An expired URL is not even downloaded.
func TestOpenAIGoneOrExpiredURLIsMadeAgain(t *testing.T) {
	f, oa, _ := lossFarm(t)
	oa.AnswerURLs(true)

	oa.FailDownloads(403)
	b := f.generate(f.c, oneGenerator("url-gone", "gpt", 1))
	tk := f.succeeded(b.ID)[0]
	if n := len(oa.Calls()); n != 2 || tk.GenerationCalls != 2 || oa.Downloads() != 2 || tk.Attempts != 1 {
		t.Fatalf("403: generate calls %d, generation_calls %d, downloads %d, attempts %d; want 2, 2, 2, 1", n, tk.GenerationCalls, oa.Downloads(), tk.Attempts)
	}
	if len(tk.History) != 1 || !strings.Contains(tk.History[0], "answered 403") {
		t.Fatalf("403: history %q", tk.History)
	}

	oa.AgeNextAnswer(61 * time.Minute)
	b = f.generate(f.c, oneGenerator("url-expired", "gpt", 1))
	tk = f.succeeded(b.ID)[0]
	if n := len(oa.Calls()); n != 4 || tk.GenerationCalls != 2 || oa.Downloads() != 3 {
		t.Fatalf("expired: generate calls %d (in all), generation_calls %d, downloads %d (in all); want 4, 2, 3", n, tk.GenerationCalls, oa.Downloads())
	}
	if len(tk.History) != 1 || !strings.Contains(tk.History[0], "expired") {
		t.Fatalf("expired: history %q", tk.History)
	}
	scrape := metricstest.Get(t, "http://"+f.api.Addr+"/metrics")
	if scrape.Value("studio_generator_discarded_total", "generator", "gpt", "reason", "gone") != 1 ||
		scrape.Value("studio_generator_discarded_total", "generator", "gpt", "reason", "expired") != 1 {
		t.Error("the metrics do not count the gone and the expired URL")
	}
}

// TestGeneratorDownWaits: ComfyUI does not answer when studio starts. The
// start-up probe logs one line for it, /readyz answers "degraded" and the
// catalog shows it down; its tasks stay queued (no attempt failed) while
// the OpenAI tasks of the same batch run. When it answers again, the
// breaker's half-open probe closes it and its tasks run, each submitted
// once. Then it goes down in the middle of a batch: the tasks that meet
// the outage are handed back, the breaker opens after three, and the
// batch succeeds once it is back, with --max-attempts 2 that five fast
// failures would have exhausted.
func TestGeneratorDownWaits(t *testing.T) {
	oa := providertest.NewOpenAI(fakeKey)
	defer oa.Server.Close()
	comfy := providertest.NewComfyUI()
	defer comfy.Server.Close()
	comfy.SetDown(true)
	t.Setenv(fakeKeyEnv, fakeKey)
	f := newFarm(t, "--catalog", remoteCatalog(t, oa, comfy), "--workers", "4", "--retry-base", "10ms", "--max-attempts", "2")
	pollFor(t, 30*time.Second, "the start-up probe's line", func() bool {
		return strings.Contains(f.api.logs.String(), "generator does not answer at start")
	})
	if logs := f.api.logs.String(); strings.Count(logs, "does not answer at start") != 1 || !strings.Contains(logs, `"generator":"comfy"`) {
		t.Fatalf("want one start-up line, for comfy:\n%s", logs)
	}
	var ready struct {
		Status     string `json:"status"`
		Generators []struct{ ID, State string }
	}
	getJSON(t, "http://"+f.api.Addr+"/readyz", "", &ready)
	if ready.Status != "degraded" || len(ready.Generators) != 2 || ready.Generators[0].ID != "comfy" || ready.Generators[0].State != "down" || ready.Generators[1].State != "up" {
		t.Fatalf("readyz %+v", ready)
	}
	var cat struct {
		Generators []struct{ ID, Kind, Health string }
	}
	getJSON(t, "http://"+f.api.Addr+"/v1/catalog", f.c.token, &cat)
	if len(cat.Generators) != 2 || cat.Generators[1].ID != "comfy" || cat.Generators[1].Health != "down" || cat.Generators[0].Health != "up" {
		t.Fatalf("catalog %+v", cat)
	}

	body := oneGenerator("down-at-start", "auto", 2)
	delete(body, "providers")
	b := f.generate(f.c, body)
	pollFor(t, 60*time.Second, "the OpenAI tasks to succeed", func() bool { return f.batch(f.c, b.ID).Counts.Succeeded == 2 })
	for _, tk := range f.tasks(f.c, b.ID) {
		if tk.Generator == "comfy" && (tk.State != intent.StateQueued || tk.Attempts != 0) {
			t.Fatalf("a comfy task ran while comfy was down: %+v", tk)
		}
	}
	comfy.SetDown(false)
	tasks := f.succeeded(b.ID)
	subs := comfy.Submissions()
	for _, tk := range tasks {
		if tk.Generator == "comfy" && (subs[tk.ID] != 1 || tk.GenerationCalls != 1) {
			t.Fatalf("comfy task %s: %d submissions, %d calls", tk.ID, subs[tk.ID], tk.GenerationCalls)
		}
	}
	if !strings.Contains(f.api.logs.String(), "generator answers again") {
		t.Fatal("no line says comfy answers again")
	}

	// Down in the middle of a batch: held by the fake, the prompts are
	// submitted; then the server stops answering.
	comfy.Hold()
	b = f.generate(f.c, oneGenerator("down-mid-batch", "comfy", 4))
	pollFor(t, 60*time.Second, "every prompt to reach the fake", func() bool { return len(comfy.Running()) == 4 })
	comfy.SetDown(true)
	pollFor(t, 60*time.Second, "the breaker to open", func() bool {
		return strings.Count(f.api.logs.String(), "fails with outage errors") == 1
	})
	if bb := f.batch(f.c, b.ID); bb.Counts.Failed != 0 {
		t.Fatalf("tasks failed while comfy was down: %+v", bb.Counts)
	}
	comfy.SetDown(false)
	comfy.Release()
	tasks = f.succeeded(b.ID)
	subs = comfy.Submissions()
	for _, tk := range tasks {
		if subs[tk.ID] != 1 || tk.GenerationCalls != 1 {
			t.Fatalf("task %s: %d submissions, %d calls; want 1, 1", tk.ID, subs[tk.ID], tk.GenerationCalls)
		}
	}
	t.Logf("calls per task through an outage mid-batch: 1; attempts %d", tasks[0].Attempts)
}

// getJSON reads a JSON answer (with a token when given).
func getJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestOpenAISizeRefusedAtPlan: a size the model does not take is refused
// when the batch is planned (422 naming params.width and the sizes the
// model takes), so it never reaches the provider to be refused on every
// attempt.
func TestOpenAISizeRefusedAtPlan(t *testing.T) {
	oa := providertest.NewOpenAI("")
	defer oa.Server.Close()
	path := t.TempDir() + "/catalog.json"
	cat := `{"generators": [{"id": "dalle", "kind": "openai", "base_url": "` + oa.BaseURL() + `", "model": "dall-e-3"}], "routes": {"auto": ["dalle"]}}`
	if err := os.WriteFile(path, []byte(cat), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFarm(t, "--catalog", path, "--workers", "1")
	body := oneGenerator("size-300x200", "dalle", 1)
	body["params"] = map[string]any{"width": 300, "height": 200}
	var problem struct {
		Errors []struct{ Field, Message string } `json:"errors"`
	}
	resp, err := f.c.do(context.Background(), "POST", "/v1/generations", body, &problem)
	if err != nil || resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("POST: %v, %v", resp, err)
	}
	if len(problem.Errors) != 1 || problem.Errors[0].Field != "params.width" || !strings.Contains(problem.Errors[0].Message, "1024x1024, 1792x1024, 1024x1792") {
		t.Fatalf("422: %+v", problem)
	}
	if n := len(oa.Calls()); n != 0 {
		t.Fatalf("%d calls reached the provider", n)
	}
}
