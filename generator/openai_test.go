package generator

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"studio/generator/providertest"
)

const testKey = "sk-test-0123456789abcdefSECRET"

// calls records what a generator's Observe hears.
type calls struct {
	mu  sync.Mutex
	got []string // "call class"
}

func (c *calls) observe(gen, call, class string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, call+" "+class)
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

func env(vals map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
}

func newTestOpenAI(t *testing.T, f *providertest.OpenAI, mutate ...func(*Spec)) (Generator, *calls) {
	t.Helper()
	s := Spec{ID: "gpt", Kind: KindOpenAI, BaseURL: f.BaseURL(), Model: "gpt-image-1",
		APIKeyEnv: "TEST_OPENAI_KEY", Timeout: Duration(5 * time.Second)}
	for _, m := range mutate {
		m(&s)
	}
	c := &calls{}
	g, err := NewWith(Options{LookupEnv: env(map[string]string{"TEST_OPENAI_KEY": testKey}), Observe: c.observe}, s)
	if err != nil {
		t.Fatal(err)
	}
	return g, c
}

// run does the three steps and answers the image or the first error.
func run(t *testing.T, g Generator, job Job) (Image, error) {
	t.Helper()
	ctx := context.Background()
	ref, err := g.Submit(ctx, job)
	if err != nil {
		return Image{}, err
	}
	if err := g.Wait(ctx, ref); err != nil {
		return Image{}, err
	}
	return g.Fetch(ctx, ref)
}

// noSecret fails when an error's text holds the key or its tail.
func noSecret(t *testing.T, err error) {
	t.Helper()
	if err != nil && (strings.Contains(err.Error(), testKey) || strings.Contains(err.Error(), testKey[len(testKey)-4:])) {
		t.Fatalf("the error shows the key: %v", err)
	}
}

func TestOpenAIGenerates(t *testing.T) {
	t.Parallel()
	f := providertest.NewOpenAI(testKey)
	defer f.Server.Close()
	for _, urls := range []bool{false, true} {
		f.AnswerURLs(urls)
		g, obs := newTestOpenAI(t, f)
		job := baseJob()
		img, err := run(t, g, job)
		if err != nil {
			t.Fatalf("urls=%v: %v", urls, err)
		}
		want := providertest.OpenAIImage("gpt-image-1", job.Prompt, "96x64")
		if !bytes.Equal(img.Bytes, want) || img.ContentType != "image/png" || img.Width != 96 || img.Height != 64 {
			t.Fatalf("urls=%v: image %s %dx%d, %d bytes; want the fake's 96x64 PNG", urls, img.ContentType, img.Width, img.Height, len(img.Bytes))
		}
		calls := f.Calls()
		last := calls[len(calls)-1]
		if last.IdempotencyKey != job.Key || last.Auth != "Bearer "+testKey || last.Size != "96x64" || last.Prompt != job.Prompt || last.Model != "gpt-image-1" {
			t.Fatalf("urls=%v: the fake got %+v", urls, last)
		}
		want2 := []string{"generate "}
		if urls {
			want2 = append(want2, "download ")
		}
		if got := obs.list(); strings.Join(got, ",") != strings.Join(want2, ",") {
			t.Fatalf("urls=%v: observed %q, want %q", urls, got, want2)
		}
	}
}

func TestOpenAISizeAndTemplate(t *testing.T) {
	t.Parallel()
	f := providertest.NewOpenAI("")
	defer f.Server.Close()
	g, _ := newTestOpenAI(t, f, func(s *Spec) {
		s.APIKeyEnv = ""
		s.Size = "256x256"
		s.Sizes = []string{SizeAny}
		s.PromptTemplate = "{{.Prompt}}, frame {{.Frame}} of {{.Collection}}, take {{.Candidate}}, seed {{.Seed}}{{with .Params.style}}, in {{.}} style{{end}}"
	})
	job := baseJob()
	job.Params = []byte(`{"style":"ink"}`)
	if _, err := run(t, g, job); err != nil {
		t.Fatal(err)
	}
	c := f.Calls()[0]
	wantPrompt := job.Prompt + ", frame f01 of walk-cycle, take 1, seed " + strconv.FormatInt(TaskSeed(job), 10) + ", in ink style"
	if c.Size != "256x256" || c.Prompt != wantPrompt || c.Auth != "" {
		t.Fatalf("got size %q prompt %q auth %q; want 256x256, %q, no auth", c.Size, c.Prompt, c.Auth, wantPrompt)
	}
	job.Params = []byte(`{"width":128}`)
	if _, err := run(t, g, job); err != nil {
		t.Fatal(err)
	}
	if c := f.Calls()[1]; c.Size != "128x128" {
		t.Fatalf("width alone: size %q, want 128x128", c.Size)
	}
}

func TestOpenAIErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		reply      providertest.Reply
		permanent  bool
		class      string
		retryAfter time.Duration
		says       string
	}{
		{"429 with Retry-After", providertest.Reply{Status: 429, RetryAfter: "7", Type: "requests", Code: "rate_limit_exceeded", Message: "Rate limit reached for images per minute."},
			false, ClassRateLimited, 7 * time.Second, "Rate limit reached"},
		{"429 out of credits", providertest.Reply{Status: 429, Type: "insufficient_quota", Code: "insufficient_quota", Message: "You exceeded your current quota."},
			true, ClassRateLimited, 0, "exceeded your current quota"},
		{"500", providertest.Reply{Status: 500, Type: "server_error", Message: "The server had an error while processing your request."},
			false, ClassUnavailable, 0, "server had an error"},
		{"503 with Retry-After", providertest.Reply{Status: 503, RetryAfter: "2", Type: "service_unavailable_error", Code: "server_is_overloaded", Message: "The engine is currently overloaded."},
			false, ClassUnavailable, 2 * time.Second, "overloaded"},
		{"400 content policy", providertest.Reply{Status: 400, Type: "invalid_request_error", Code: "content_policy_violation", Message: "Your request was rejected as a result of our safety system."},
			true, ClassRejected, 0, "rejected as a result of our safety system"},
		{"404 model", providertest.Reply{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Message: "The model 'gpt-image-9' does not exist."},
			true, ClassRejected, 0, "does not exist"},
		{"403 with the key quoted", providertest.Reply{Status: 403, Type: "invalid_request_error", Message: "Key " + testKey + " may not use images."},
			true, ClassAuth, 0, "TEST_OPENAI_KEY"},
		{"400 with the key quoted", providertest.Reply{Status: 400, Type: "invalid_request_error", Message: "Key " + testKey + " is malformed."},
			true, ClassRejected, 0, "Key [redacted] is malformed."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := providertest.NewOpenAI(testKey)
			defer f.Server.Close()
			f.Fail(c.reply)
			g, obs := newTestOpenAI(t, f)
			_, err := run(t, g, baseJob())
			noSecret(t, err)
			var pe *ProviderError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a ProviderError", err)
			}
			ra, _ := RetryAfter(err)
			if IsPermanent(err) != c.permanent || pe.Class != c.class || ra != c.retryAfter || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), `"gpt"`) {
				t.Fatalf("error %q: permanent %v class %s retry-after %v; want %v %s %v, saying %q and naming the generator",
					err, IsPermanent(err), pe.Class, ra, c.permanent, c.class, c.retryAfter, c.says)
			}
			if got := obs.list(); len(got) != 1 || got[0] != "generate "+c.class {
				t.Fatalf("observed %q", got)
			}
			// The script is spent: the next try succeeds, with the same key.
			if !c.permanent {
				if _, err := run(t, g, baseJob()); err != nil {
					t.Fatalf("retry: %v", err)
				}
				calls := f.Calls()
				if calls[0].IdempotencyKey != calls[1].IdempotencyKey {
					t.Fatalf("a retry changed the Idempotency-Key: %q, %q", calls[0].IdempotencyKey, calls[1].IdempotencyKey)
				}
			}
		})
	}
}

func TestOpenAIWrongKey(t *testing.T) {
	t.Parallel()
	f := providertest.NewOpenAI("sk-the-right-one-xyz")
	defer f.Server.Close()
	g, _ := newTestOpenAI(t, f)
	_, err := run(t, g, baseJob())
	noSecret(t, err)
	if !IsPermanent(err) || ErrorClass(err) != ClassAuth || !strings.Contains(err.Error(), "TEST_OPENAI_KEY") || !strings.Contains(err.Error(), `"gpt"`) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong key: %v", err)
	}
	if c := f.Calls()[0]; c.Status != 401 {
		t.Fatalf("the fake answered %d", c.Status)
	}
}

func TestOpenAITimeoutAndNetwork(t *testing.T) {
	t.Parallel()
	f := providertest.NewOpenAI("")
	defer f.Server.Close()
	f.SetDelay(10 * time.Second)
	g, _ := newTestOpenAI(t, f, func(s *Spec) { s.APIKeyEnv = ""; s.Timeout = Duration(100 * time.Millisecond) })
	_, err := run(t, g, baseJob())
	if IsPermanent(err) || ErrorClass(err) != ClassTimeout || !strings.Contains(err.Error(), "100ms") {
		t.Fatalf("slow provider: %v", err)
	}

	dead := providertest.NewOpenAI("")
	dead.Server.Close()
	g, _ = newTestOpenAI(t, dead, func(s *Spec) { s.APIKeyEnv = "" })
	_, err = run(t, g, baseJob())
	if IsPermanent(err) || ErrorClass(err) != ClassNetwork {
		t.Fatalf("closed server: %v (class %q)", err, ErrorClass(err))
	}

	// The caller's own cancel is not the provider's failure.
	ctx, cancel := context.WithCancel(context.Background())
	g, obs := newTestOpenAI(t, f, func(s *Spec) { s.APIKeyEnv = "" })
	ref, err := g.Submit(ctx, baseJob())
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = g.Fetch(ctx, ref)
	if !errors.Is(err, context.Canceled) || ErrorClass(err) != "" || len(obs.list()) != 0 {
		t.Fatalf("canceled fetch: %v, observed %q", err, obs.list())
	}
}

func TestOpenAIBadAnswers(t *testing.T) {
	t.Parallel()
	f := providertest.NewOpenAI("")
	defer f.Server.Close()
	// A size the provider refuses: its own message, permanent.
	g, _ := newTestOpenAI(t, f, func(s *Spec) { s.APIKeyEnv = ""; s.Size = "huge"; s.Sizes = []string{SizeAny} })
	job := baseJob()
	job.Params = nil
	_, err := run(t, g, job)
	if !IsPermanent(err) || ErrorClass(err) != ClassRejected || !strings.Contains(err.Error(), "Invalid value: 'huge'") {
		t.Fatalf("refused size: %v", err)
	}
	if _, err := g.Fetch(context.Background(), "sketch:abc"); !IsPermanent(err) {
		t.Fatalf("a foreign reference: %v", err)
	}
}

func TestOpenAISpecChecks(t *testing.T) {
	t.Parallel()
	base := Spec{ID: "gpt", Kind: KindOpenAI, BaseURL: "https://api.openai.com/v1", Model: "gpt-image-1", APIKeyEnv: "K"}
	cases := map[string]struct {
		mutate func(*Spec)
		says   string
	}{
		"unset key variable": {func(s *Spec) { s.APIKeyEnv = "UNSET_KEY" }, "UNSET_KEY, which is not set"},
		"no base_url":        {func(s *Spec) { s.BaseURL = "" }, "base_url is required"},
		"ftp base_url":       {func(s *Spec) { s.BaseURL = "ftp://x/v1" }, "not an http(s) URL"},
		"key in the URL":     {func(s *Spec) { s.BaseURL = "https://u:p@x/v1" }, "credentials"},
		"no model":           {func(s *Spec) { s.Model = "" }, "model is required"},
		"bad template":       {func(s *Spec) { s.PromptTemplate = "{{.Prompt" }, "prompt_template"},
		"unknown field":      {func(s *Spec) { s.PromptTemplate = "{{.Style}}" }, "can't evaluate field Style"},
		"comfy member":       {func(s *Spec) { s.OutputNode = "9" }, "output_node is not a member of kind \"openai\""},
	}
	for name, c := range cases {
		s := base
		c.mutate(&s)
		_, err := NewWith(Options{LookupEnv: env(map[string]string{"K": "v"})}, s)
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), `"gpt"`) {
			t.Errorf("%s: %v; want it to say %q and name the generator", name, err, c.says)
		}
	}
	if _, err := NewWith(Options{LookupEnv: env(map[string]string{"K": "v"})}, base); err != nil {
		t.Fatal(err)
	}
	if _, err := NewWith(Options{}, Spec{ID: Sketch, Kind: KindEmbedded, Model: "x"}); err == nil || !strings.Contains(err.Error(), "model is not a member") {
		t.Fatalf("embedded with a model: %v", err)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := map[string]time.Duration{
		"7":                             7 * time.Second,
		"0":                             0,
		"-3":                            0,
		"soon":                          0,
		"99999999":                      time.Hour,
		"Fri, 02 Jan 2026 03:04:35 GMT": 30 * time.Second,
		"Fri, 02 Jan 2026 03:00:00 GMT": 0,
	}
	for v, want := range cases {
		h := map[string][]string{"Retry-After": {v}}
		if got := retryAfter(h, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}
	if got := retryAfter(map[string][]string{"Retry-After-Ms": {"1500"}, "Retry-After": {"9"}}, now); got != 1500*time.Millisecond {
		t.Errorf("retry-after-ms: %v", got)
	}
	if got := retryAfter(map[string][]string{"Retry-After-Ms": {"1e300"}}, now); got != time.Hour {
		t.Errorf("a huge retry-after-ms: %v, want the 1h bound", got)
	}
}

func TestTaskSeed(t *testing.T) {
	t.Parallel()
	job := baseJob()
	s := TaskSeed(job)
	if s < 0 || s > MaxTaskSeed {
		t.Fatalf("seed %d out of range", s)
	}
	// The documented formula, pinned: a change breaks every user's seeds.
	// (python3: see docs/catalog.md, "Seeds").
	if s != 2953958575 {
		t.Fatalf("seed of the base job: %d, want 2953958575", s)
	}
	retry := job
	retry.Attempt = 3
	if TaskSeed(retry) != s {
		t.Fatal("a retry changed the seed")
	}
	seen := map[int64]string{s: "base"}
	vary := map[string]func(*Job){
		"candidate 2":  func(j *Job) { j.Candidate = 2 },
		"frame f02":    func(j *Job) { j.Frame = "f02" },
		"collection":   func(j *Job) { j.Collection = "run-cycle" },
		"seed 8":       func(j *Job) { j.Seed = seed(8) },
		"no seed":      func(j *Job) { j.Seed = nil },
		"no seed, key": func(j *Job) { j.Seed = nil; j.Key = "other-task" },
	}
	for name, m := range vary {
		j := baseJob()
		m(&j)
		v := TaskSeed(j)
		if prev, dup := seen[v]; dup {
			t.Errorf("%s has the seed of %s", name, prev)
		}
		seen[v] = name
	}
	other := baseJob()
	other.Key = "another-task"
	if TaskSeed(other) != s {
		t.Error("with a request seed, the task id changed the seed")
	}
}

// TestOpenAICompatibleDataURL: a compatible server that answers b64_json
// as a data: URL (some local servers do) still gives the image.
func TestOpenAICompatibleDataURL(t *testing.T) {
	t.Parallel()
	png := providertest.OpenAIImage("m", "p", "32x16")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/images/generations" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"created":1,"data":[{"b64_json":"data:image/png;base64,%s"}]}`, base64.StdEncoding.EncodeToString(png))
	}))
	defer srv.Close()
	g, err := NewWith(Options{}, Spec{ID: "local", Kind: KindOpenAI, BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	img, err := run(t, g, baseJob())
	if err != nil || !bytes.Equal(img.Bytes, png) || img.Width != 32 {
		t.Fatalf("data URL: %v, %d bytes", err, len(img.Bytes))
	}
}
