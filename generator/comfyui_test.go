package generator

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"studio/generator/providertest"
)

// workflowPath is the example workflow of the repository's catalogs.
const workflowPath = "../testdata/catalogs/comfy/txt2img.json"

func comfySpec(base string) Spec {
	return Spec{ID: "comfy", Kind: KindComfyUI, BaseURL: base, Workflow: workflowPath,
		Inputs: map[string]string{"prompt": "6.inputs.text", "seed": "3.inputs.seed",
			"width": "5.inputs.width", "height": "5.inputs.height"},
		OutputNode: "9", PollInterval: Duration(5 * time.Millisecond), Timeout: Duration(5 * time.Second)}
}

func newTestComfy(t *testing.T, f *providertest.ComfyUI, mutate ...func(*Spec)) (Generator, *calls) {
	t.Helper()
	s := comfySpec(f.BaseURL())
	for _, m := range mutate {
		m(&s)
	}
	c := &calls{}
	g, err := NewWith(Options{Observe: c.observe}, s)
	if err != nil {
		t.Fatal(err)
	}
	return g, c
}

func TestComfyUIGenerates(t *testing.T) {
	t.Parallel()
	f := providertest.NewComfyUI()
	defer f.Server.Close()
	// The prompt runs until Wait has found its history empty and looked
	// it up in the queue: then it finishes. Releasing on what the
	// generator did, not after a delay, keeps the history empty for a
	// while however slow the machine is.
	f.Hold()
	obs := &calls{}
	var release sync.Once
	observe := func(gen, call, class string, d time.Duration) {
		obs.observe(gen, call, class, d)
		seen := map[string]int{}
		for _, c := range obs.list() {
			seen[c]++
		}
		// Submit's history and queue, then Wait's history, queue and
		// history again: the prompt was pending while Wait polled.
		if seen["history "] >= 3 && seen["queue "] >= 2 {
			release.Do(f.Release)
		}
	}
	s := comfySpec(f.BaseURL())
	// The generator's timeout bounds each call and the whole wait. This
	// test is not about timeouts (TestComfyUIErrors/wait_timeout is), and
	// under -race on a loaded machine the fake alone takes seconds to draw
	// a 512x512 PNG: a bound no run reaches.
	s.Timeout = Duration(2 * time.Minute)
	g, err := NewWith(Options{Observe: observe}, s)
	if err != nil {
		t.Fatal(err)
	}
	job := comfyJob()
	img, err := run(t, g, job)
	if err != nil {
		t.Fatal(err)
	}
	want := providertest.ComfyImage(job.Prompt, TaskSeed(job), 96, 64)
	if !bytes.Equal(img.Bytes, want) || img.Width != 96 || img.Height != 64 || img.ContentType != "image/png" {
		t.Fatalf("image %s %dx%d (%d bytes); want the fake's 96x64 PNG of the prompt and the task's seed", img.ContentType, img.Width, img.Height, len(img.Bytes))
	}
	if got := f.Submissions(); len(got) != 1 || got[job.Key] != 1 {
		t.Fatalf("submissions %v; want one under the task id", got)
	}
	seen := map[string]int{}
	for _, c := range obs.list() {
		seen[c]++
	}
	if seen["submit "] != 1 || seen["history "] < 3 || seen["queue "] < 2 || seen["view "] != 1 {
		t.Fatalf("observed calls %v", seen)
	}

	// Without width and height, the workflow's own size stays.
	job2 := comfyJob()
	job2.Key, job2.Params = "01920000-0000-7000-8000-000000000002", nil
	img, err = run(t, g, job2)
	if err != nil || img.Width != 512 || img.Height != 512 {
		t.Fatalf("no size params: %dx%d, %v", img.Width, img.Height, err)
	}
}

// TestComfyUISubmitIsIdempotent: a second Submit of a task (a retry, a
// resumed worker) finds the prompt queued, running or done, and queues
// nothing.
func TestComfyUISubmitIsIdempotent(t *testing.T) {
	t.Parallel()
	f := providertest.NewComfyUI()
	defer f.Server.Close()
	f.Hold()
	g, _ := newTestComfy(t, f)
	ctx := context.Background()
	jobs := []Job{comfyJob(), comfyJob()}
	jobs[1].Key = "01920000-0000-7000-8000-000000000003"
	for _, j := range jobs { // the second is pending behind the first
		for try := 0; try < 3; try++ {
			ref, err := g.Submit(ctx, j)
			if err != nil || ref != j.Key {
				t.Fatalf("submit %s try %d: %q, %v", j.Key, try, ref, err)
			}
		}
	}
	f.Release()
	for _, j := range jobs {
		if err := g.Wait(ctx, j.Key); err != nil {
			t.Fatal(err)
		}
		if ref, err := g.Submit(ctx, j); err != nil || ref != j.Key { // done: in the history
			t.Fatalf("submit after done: %q, %v", ref, err)
		}
	}
	if got := f.Submissions(); len(got) != 2 || got[jobs[0].Key] != 1 || got[jobs[1].Key] != 1 || f.Posts() != 2 {
		t.Fatalf("submissions %v, posts %d; want one each", got, f.Posts())
	}
}

// TestComfyUISubmitWhileThePromptFinishes: a second Submit whose prompt
// finishes between its two lookups still queues nothing. ComfyUI moves a
// prompt from the queue to the history in one step (execution.py,
// PromptQueue.task_done), but Submit's two GETs are apart: looked up in
// the history first, then in the queue, a prompt that finished in
// between is in neither answer and was queued again.
func TestComfyUISubmitWhileThePromptFinishes(t *testing.T) {
	t.Parallel()
	f := providertest.NewComfyUI()
	defer f.Server.Close()
	f.Hold()
	var armed, released atomic.Bool
	var release sync.Once
	// In front of the fake: once armed, the first lookup (history or
	// queue, whichever Submit makes first) is answered, then the prompt
	// finishes, before the next lookup.
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.Server.Config.Handler.ServeHTTP(w, r)
		if r.Method == http.MethodGet && armed.Load() {
			release.Do(func() { f.Release(); released.Store(true) })
		}
	}))
	defer front.Close()
	g, _ := newTestComfy(t, f, func(s *Spec) { s.BaseURL = front.URL })
	ctx := context.Background()
	job := comfyJob()
	if ref, err := g.Submit(ctx, job); err != nil || ref != job.Key {
		t.Fatalf("first submit: %q, %v", ref, err)
	}
	armed.Store(true)
	if ref, err := g.Submit(ctx, job); err != nil || ref != job.Key {
		t.Fatalf("second submit: %q, %v", ref, err)
	}
	if !released.Load() {
		t.Fatal("the prompt did not finish during the second submit: the test tested nothing")
	}
	if err := g.Wait(ctx, job.Key); err != nil {
		t.Fatal(err)
	}
	if got := f.Submissions(); got[job.Key] != 1 || f.Posts() != 1 {
		t.Fatalf("submissions %v, posts %d; want the prompt queued once", got, f.Posts())
	}
}

func TestComfyUIErrors(t *testing.T) {
	t.Parallel()
	t.Run("invalid workflow", func(t *testing.T) {
		t.Parallel()
		f := providertest.NewComfyUI()
		defer f.Server.Close()
		wf := writeWorkflow(t, func(s string) string { return strings.Replace(s, `"VAEDecode"`, `"VAEDecodeTurbo"`, 1) })
		g, _ := newTestComfy(t, f, func(s *Spec) { s.Workflow = wf })
		_, err := run(t, g, comfyJob())
		if !IsPermanent(err) || ErrorClass(err) != ClassRejected || !strings.Contains(err.Error(), "Cannot execute because node VAEDecodeTurbo does not exist") {
			t.Fatalf("invalid workflow: %v", err)
		}
	})
	t.Run("node errors", func(t *testing.T) {
		t.Parallel()
		f := providertest.NewComfyUI()
		defer f.Server.Close()
		// The prompt goes to a number input: text stays a number, which
		// the fake refuses as ComfyUI refuses a missing input.
		wf := writeWorkflow(t, func(s string) string {
			return strings.Replace(s, `"blurry, low quality, watermark"`, `7`, 1)
		})
		g, _ := newTestComfy(t, f, func(s *Spec) { s.Workflow = wf })
		_, err := run(t, g, comfyJob())
		if !IsPermanent(err) || !strings.Contains(err.Error(), "Prompt outputs failed validation") || !strings.Contains(err.Error(), "node 7 (CLIPTextEncode): Required input is missing: text") {
			t.Fatalf("node errors: %v", err)
		}
	})
	t.Run("execution error", func(t *testing.T) {
		t.Parallel()
		f := providertest.NewComfyUI()
		defer f.Server.Close()
		f.FailNextExecution("CUDA out of memory. Tried to allocate 2.00 GiB")
		g, _ := newTestComfy(t, f)
		_, err := run(t, g, comfyJob())
		if !IsPermanent(err) || !strings.Contains(err.Error(), "node 3 (KSampler): RuntimeError: CUDA out of memory") {
			t.Fatalf("execution error: %v", err)
		}
	})
	t.Run("transient then fine", func(t *testing.T) {
		t.Parallel()
		f := providertest.NewComfyUI()
		defer f.Server.Close()
		f.Fail("history", providertest.Reply{Status: 502})
		f.Fail("prompt", providertest.Reply{Status: 429, RetryAfter: "3"}, providertest.Reply{Status: 500, Type: "exception", Message: "boom"})
		g, _ := newTestComfy(t, f)
		ctx := context.Background()
		_, err := g.Submit(ctx, comfyJob()) // history 502
		if IsPermanent(err) || ErrorClass(err) != ClassUnavailable {
			t.Fatalf("502: %v", err)
		}
		_, err = g.Submit(ctx, comfyJob()) // prompt 429
		if d, ok := RetryAfter(err); IsPermanent(err) || ErrorClass(err) != ClassRateLimited || !ok || d != 3*time.Second {
			t.Fatalf("429: %v", err)
		}
		_, err = g.Submit(ctx, comfyJob()) // prompt 500
		if IsPermanent(err) || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("500: %v", err)
		}
		if _, err := run(t, g, comfyJob()); err != nil {
			t.Fatal(err)
		}
		if got := f.Submissions(); got[comfyJob().Key] != 1 {
			t.Fatalf("submissions %v", got)
		}
	})
	t.Run("lost prompt", func(t *testing.T) {
		t.Parallel()
		f := providertest.NewComfyUI()
		defer f.Server.Close()
		g, _ := newTestComfy(t, f)
		err := g.Wait(context.Background(), "never-submitted")
		if IsPermanent(err) || !strings.Contains(err.Error(), "neither queued nor in the history") {
			t.Fatalf("lost prompt: %v", err)
		}
	})
	t.Run("wait timeout", func(t *testing.T) {
		t.Parallel()
		f := providertest.NewComfyUI()
		defer f.Server.Close()
		f.Hold()
		// Submitted with the default timeout (a loaded machine may take
		// longer than the short one to answer a request), then waited
		// for by a generator on the same server with a short one.
		sub, _ := newTestComfy(t, f)
		ref, err := sub.Submit(context.Background(), comfyJob())
		if err != nil {
			t.Fatal(err)
		}
		g, _ := newTestComfy(t, f, func(s *Spec) { s.Timeout = Duration(80 * time.Millisecond) })
		err = g.Wait(context.Background(), ref)
		if IsPermanent(err) || ErrorClass(err) != ClassTimeout {
			t.Fatalf("held prompt: %v", err)
		}
		// The canceled wait uses the test spec's 5 s timeout, far past
		// the 30 ms cancel, so that only the cancel can end it.
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
		if err := sub.Wait(ctx, ref); !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled wait: %v", err)
		}
	})
}

// writeWorkflow writes the example workflow, changed by edit, to a
// temporary file.
func writeWorkflow(t *testing.T, edit func(string) string) string {
	t.Helper()
	b, err := os.ReadFile(workflowPath)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "wf.json")
	if err := os.WriteFile(p, []byte(edit(string(b))), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestComfyUISpecChecks(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		mutate func(*Spec)
		says   string
	}{
		"missing workflow": {func(s *Spec) { s.Workflow = "nowhere/wf.json" }, "no such file"},
		"no workflow":      {func(s *Spec) { s.Workflow = "" }, "workflow is required"},
		"not API format": {func(s *Spec) {
			s.Workflow = writeWorkflow(t, func(string) string { return `{"nodes": [], "links": []}` })
		}, "not a workflow in API format"},
		"missing node":      {func(s *Spec) { s.Inputs["seed"] = "31.inputs.seed" }, `has no node "31"`},
		"missing field":     {func(s *Spec) { s.Inputs["seed"] = "3.inputs.noise_seed" }, `node "3" (KSampler) of workflow`},
		"bad path":          {func(s *Spec) { s.Inputs["seed"] = "3.seed" }, `not like "6.inputs.text"`},
		"unknown input":     {func(s *Spec) { s.Inputs["negative"] = "7.inputs.text" }, "inputs.negative: unknown input"},
		"no prompt input":   {func(s *Spec) { delete(s.Inputs, "prompt") }, "inputs.prompt is required"},
		"no output node":    {func(s *Spec) { s.OutputNode = "" }, "output_node is required"},
		"wrong output node": {func(s *Spec) { s.OutputNode = "99" }, `output_node: workflow`},
		"unset key":         {func(s *Spec) { s.APIKeyEnv = "COMFY_UNSET_KEY" }, "COMFY_UNSET_KEY, which is not set"},
		"bad template":      {func(s *Spec) { s.PromptTemplate = "{{if}}" }, "prompt_template"},
		"openai member":     {func(s *Spec) { s.Model = "x" }, `model is not a member of kind "comfyui"`},
	}
	for name, c := range cases {
		s := comfySpec("http://127.0.0.1:8188")
		c.mutate(&s)
		err := CheckSpec(s)
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), `"comfy"`) {
			t.Errorf("%s: %v; want it to say %q and name the generator", name, err, c.says)
		}
	}
	if err := CheckSpec(comfySpec("http://127.0.0.1:8188")); err != nil {
		t.Fatal(err)
	}
}

func TestProviderErrorMessages(t *testing.T) {
	t.Parallel()
	comfy := map[string]string{
		`{"error": "no prompt", "node_errors": []}`: "no prompt",
		`{"error": {"type": "prompt_no_outputs", "message": "Prompt has no outputs", "details": "", "extra_info": {}}, "node_errors": []}`: "Prompt has no outputs",
		`{"error": {"type": "prompt_outputs_failed_validation", "message": "Prompt outputs failed validation", "details": "Value not in list: ckpt_name: 'x' not in []"},
		  "node_errors": {"10": {"class_type": "KSampler", "errors": [{"message": "m10", "details": "d10"}]},
		                  "4": {"class_type": "CheckpointLoaderSimple", "errors": [{"message": "Value not in list", "details": "ckpt_name: 'x' not in []"}]}}}`: "Prompt outputs failed validation: Value not in list: ckpt_name: 'x' not in []; node 4 (CheckpointLoaderSimple): Value not in list: ckpt_name: 'x' not in []; node 10 (KSampler): m10: d10",
		`Internal Server Error`:         "Internal Server Error",
		`<html><body>502</body></html>`: "",
	}
	for body, want := range comfy {
		if got, _ := comfyErrorMessage([]byte(body)); got != want {
			t.Errorf("comfy %s:\n got %q\nwant %q", body, got, want)
		}
	}
	oa := map[string][2]string{
		`{"error": {"message": "Rate limit reached", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}`:       {"Rate limit reached", "rate_limit_exceeded"},
		`{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "param": null, "code": null}}`: {"You exceeded your current quota", "insufficient_quota"},
		`upstream connect error`: {"upstream connect error", ""},
	}
	for body, want := range oa {
		if msg, code := openAIErrorMessage([]byte(body)); msg != want[0] || code != want[1] {
			t.Errorf("openai %s: %q %q, want %q", body, msg, code, want)
		}
	}
}

// comfyJob is baseJob with a task id as studio makes them (a lowercase
// UUID), which ComfyUI requires of a prompt_id.
func comfyJob() Job {
	j := baseJob()
	j.Key = "01920000-0000-7000-8000-000000000001"
	return j
}
