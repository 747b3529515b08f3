package providertest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// OpenAI is a fake OpenAI Images API. It follows the API reference of
// "Create image" (POST /v1/images/generations, https://platform.openai.com/docs/api-reference/images/create):
// a JSON body with model and prompt required, n (1..10, default 1), size
// and other documented members; an answer {"created", "data": [{"b64_json"}
// or {"url"}]}; errors as {"error": {"message", "type", "param", "code"}}
// with 400 invalid_request_error for a bad body (an unknown parameter, a
// missing prompt, an unsupported size), 401 for a missing or wrong key
// (whose message quotes the key masked, as OpenAI's does), 429
// rate_limit_exceeded (with Retry-After) and 5xx server_error, per
// https://platform.openai.com/docs/guides/error-codes.
//
// With AnswerURLs, data[0].url names the image on the fake's own file
// host, as dall-e models answer by default ("URLs are only valid for 60
// minutes after the image has been generated", the reference says of
// response_format): FailDownloads scripts that host's next answers,
// ExpireURLs makes it refuse every URL made so far (403, as a storage
// host refuses an expired signature), and AgeNextAnswer backdates
// "created" so that a client sees the 60 minutes past before it downloads.
// GET /v1/models answers the model list (the API's "List models"), which
// studio probes at start. SetDown makes the server answer nothing.
//
// Scripted replies (Fail) answer the next requests before any check of
// the body. Every request is recorded (Calls, Downloads).
type OpenAI struct {
	Server *httptest.Server
	// Key is the API key it takes; empty: it takes none.
	Key string

	mu     sync.Mutex
	script []Reply
	delay  time.Duration
	urls   bool
	calls  []OpenAICall
	files  map[string][]byte
	count  int
	down   bool
	age    time.Duration
	dlFail []int
	dls    int
}

// OpenAICall is one request the fake took.
type OpenAICall struct {
	IdempotencyKey string
	Auth           string // the Authorization header
	Model, Prompt  string
	Size           string
	Status         int // what it answered
}

// NewOpenAI starts a fake that takes the key (empty: none). Close it with
// Server.Close.
func NewOpenAI(key string) *OpenAI {
	f := &OpenAI{Key: key, files: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/images/generations", f.generate)
	mux.HandleFunc("GET /v1/models", f.models)
	mux.HandleFunc("GET /files/{name}", f.file)
	f.Server = httptest.NewServer(downable(&f.mu, &f.down, mux))
	return f
}

// SetDown makes the server answer nothing (on) or answer again (off).
func (f *OpenAI) SetDown(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = on
}

// FailDownloads makes the file host answer the next downloads with these
// statuses, in order.
func (f *OpenAI) FailDownloads(statuses ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dlFail = append(f.dlFail, statuses...)
}

// ExpireURLs makes every URL answered so far fail with 403.
func (f *OpenAI) ExpireURLs() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files = map[string][]byte{}
}

// AgeNextAnswer backdates the "created" time of the next answer by d.
func (f *OpenAI) AgeNextAnswer(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.age = d
}

// Downloads is how many image downloads the file host took, failed ones
// included.
func (f *OpenAI) Downloads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dls
}

func (f *OpenAI) models(w http.ResponseWriter, r *http.Request) {
	if f.Key != "" && r.Header.Get("Authorization") != "Bearer "+f.Key {
		openAIError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "", "Incorrect API key provided.")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{
		map[string]any{"id": "gpt-image-1", "object": "model", "created": 1745000000, "owned_by": "system"},
		map[string]any{"id": "dall-e-3", "object": "model", "created": 1698785189, "owned_by": "system"},
	}})
}

// BaseURL is the base_url a catalog gives for this fake.
func (f *OpenAI) BaseURL() string { return f.Server.URL + "/v1" }

// Fail scripts the answers to the next requests, in order.
func (f *OpenAI) Fail(replies ...Reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, replies...)
}

// SetDelay makes each generation take d (a slow provider).
func (f *OpenAI) SetDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// AnswerURLs makes the fake answer data[0].url (as dall-e models do by
// default) instead of data[0].b64_json.
func (f *OpenAI) AnswerURLs(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.urls = on
}

// Calls lists the requests taken so far.
func (f *OpenAI) Calls() []OpenAICall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]OpenAICall(nil), f.calls...)
}

// OpenAIImage is the PNG the fake makes for a prompt at a size ("WxH").
func OpenAIImage(model, prompt, size string) []byte {
	w, h, _ := parseSize(size, 4096)
	return makePNG("openai\x00"+model+"\x00"+prompt, w, h)
}

func openAIError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if code != "" {
		e["code"] = code
	}
	if param != "" {
		e["param"] = param
	}
	json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// imagesParams are the documented members of a create-image body.
var imagesParams = map[string]bool{
	"prompt": true, "model": true, "n": true, "quality": true, "response_format": true, "size": true,
	"style": true, "user": true, "background": true, "moderation": true, "output_compression": true,
	"output_format": true,
}

func (f *OpenAI) generate(w http.ResponseWriter, r *http.Request) {
	call := OpenAICall{IdempotencyKey: r.Header.Get("Idempotency-Key"), Auth: r.Header.Get("Authorization")}
	status := http.StatusOK
	defer func() {
		call.Status = status
		f.mu.Lock()
		f.calls = append(f.calls, call)
		f.mu.Unlock()
	}()
	body, _ := io.ReadAll(r.Body)
	var in map[string]json.RawMessage
	_ = json.Unmarshal(body, &in)
	str := func(k string) string {
		var s string
		json.Unmarshal(in[k], &s)
		return s
	}
	call.Model, call.Prompt, call.Size = str("model"), str("prompt"), str("size")

	if r.Method != http.MethodPost {
		status = http.StatusMethodNotAllowed
		openAIError(w, status, "invalid_request_error", "", "", "Invalid method for URL (GET /v1/images/generations)")
		return
	}
	f.mu.Lock()
	var scripted *Reply
	if len(f.script) > 0 {
		scripted = &f.script[0]
		f.script = f.script[1:]
	}
	delay, urls := f.delay, f.urls
	f.mu.Unlock()
	if scripted != nil {
		status = scripted.Status
		writeRetryAfter(w, *scripted)
		openAIError(w, status, scripted.Type, scripted.Code, "", scripted.Message)
		return
	}
	if f.Key != "" {
		got, ok := strings.CutPrefix(call.Auth, "Bearer ")
		switch {
		case !ok || got == "":
			status = http.StatusUnauthorized
			openAIError(w, status, "invalid_request_error", "", "", "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
			return
		case got != f.Key:
			status = http.StatusUnauthorized
			openAIError(w, status, "invalid_request_error", "invalid_api_key", "", "Incorrect API key provided: "+mask(got)+". You can find your API key at https://platform.openai.com/account/api-keys.")
			return
		}
	}
	if json.Unmarshal(body, &in) != nil {
		status = http.StatusBadRequest
		openAIError(w, status, "invalid_request_error", "", "", "We could not parse the JSON body of your request.")
		return
	}
	for k := range in {
		if !imagesParams[k] {
			status = http.StatusBadRequest
			openAIError(w, status, "invalid_request_error", "unknown_parameter", k, fmt.Sprintf("Unknown parameter: '%s'.", k))
			return
		}
	}
	if call.Prompt == "" {
		status = http.StatusBadRequest
		openAIError(w, status, "invalid_request_error", "", "prompt", "Missing required parameter: 'prompt'.")
		return
	}
	if n, ok := in["n"]; ok && string(n) != "1" {
		status = http.StatusBadRequest
		openAIError(w, status, "invalid_request_error", "", "n", "this fake makes one image per request: n must be 1")
		return
	}
	size := call.Size
	if size == "" || size == "auto" {
		size = "1024x1024"
	}
	if _, _, ok := parseSize(size, 4096); !ok {
		status = http.StatusBadRequest
		openAIError(w, status, "invalid_request_error", "invalid_value", "size", fmt.Sprintf("Invalid value: '%s'. Supported values are: '1024x1024', '1024x1536', '1536x1024', and 'auto'.", call.Size))
		return
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			status = 499
			return
		}
	}
	img := OpenAIImage(call.Model, call.Prompt, size)
	item := map[string]any{}
	if urls {
		f.mu.Lock()
		f.count++
		name := fmt.Sprintf("img-%d.png", f.count)
		f.files[name] = img
		f.mu.Unlock()
		item["url"] = f.Server.URL + "/files/" + name + "?sig=fake"
	} else {
		item["b64_json"] = base64.StdEncoding.EncodeToString(img)
	}
	w.Header().Set("Content-Type", "application/json")
	f.mu.Lock()
	created := time.Now().Add(-f.age).Unix()
	f.age = 0
	f.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"created": created, "data": []any{item}})
}

func (f *OpenAI) file(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.dls++
	fail := 0
	if len(f.dlFail) > 0 {
		fail, f.dlFail = f.dlFail[0], f.dlFail[1:]
	}
	b, ok := f.files[r.PathValue("name")]
	f.mu.Unlock()
	if fail != 0 {
		http.Error(w, http.StatusText(fail), fail)
		return
	}
	if !ok && r.Header.Get("Authorization") == "" && strings.HasPrefix(r.PathValue("name"), "img-") {
		// A signed URL past its expiry: the storage host refuses it.
		http.Error(w, "AuthenticationFailed: Signed expiry time has passed", http.StatusForbidden)
		return
	}
	if !ok || r.Header.Get("Authorization") != "" {
		// The signed URL needs no key; a client that sends one sends it
		// to a host that should not see it.
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Write(b)
}

// mask writes a key as OpenAI's 401 message does: its first and last
// characters around stars.
func mask(key string) string {
	if len(key) <= 8 {
		return strings.Repeat("*", len(key))
	}
	return key[:3] + strings.Repeat("*", len(key)-7) + key[len(key)-4:]
}
