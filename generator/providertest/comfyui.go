package providertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// ComfyUI is a fake ComfyUI server. It follows ComfyUI's server.py and
// execution.py (github.com/comfyanonymous/ComfyUI) as of the releases that
// check a client's prompt_id (the newest, v0.4.x: see docs/catalog.md,
// "ComfyUI versions"), and its documented routes
// (https://docs.comfy.org/development/comfyui-server/comms_routes):
//
//   - POST /prompt {"prompt": <workflow in API format>, "prompt_id"?,
//     "client_id"?} validates the workflow (every class_type known, at
//     least one output node such as SaveImage) and answers
//     {"prompt_id", "number", "node_errors": {}}, or 400 with
//     {"error": {"type", "message", "details", "extra_info"},
//     "node_errors": {...}}. A given prompt_id must be a canonical
//     lowercase UUID, else 400 with error type "invalid_prompt_id"
//     (server.py validates it before the workflow); without one the
//     server makes a uuid4. Like
//     ComfyUI (server.py post_prompt puts every valid prompt;
//     execution.py PromptQueue.put has no check), a prompt_id it already
//     has is queued again, as another item at the back, and its history
//     entry, if any, stays until that run finishes and replaces it
//     (PromptQueue.task_done writes history[prompt_id]). The fake counts
//     each (see Submissions).
//   - GET /queue answers {"queue_running": [...], "queue_pending": [...]},
//     items [number, prompt_id, prompt, extra_data, outputs_to_execute].
//   - GET /history/{prompt_id} answers {} until the prompt has run, then
//     {prompt_id: {"prompt": [...], "outputs": {node: {"images":
//     [{"filename", "subfolder", "type"}]}}, "status": {"status_str",
//     "completed", "messages": [[event, data], ...]}}}; a failed run has
//     status_str "error" and an execution_error message.
//   - GET /view?filename=&subfolder=&type= answers the image, 404 when
//     there is none.
//   - POST /history {"clear": true} or {"delete": [prompt_id, ...]}
//     removes history entries (PromptQueue.wipe_history,
//     delete_history_item); POST /queue {"clear": true} empties the
//     pending queue (wipe_queue).
//   - GET /system_stats answers {"system": {...}, "devices": [...]}.
//
// Restart loses the queue and the history, as a restarted ComfyUI does
// (both live in memory; execution.py keeps no history on disk), but not
// the files in its output folder; DeleteOutputs removes those. SetDown
// makes it answer nothing (every connection closed at once), like a
// server that is down.
//
// A prompt runs for the delay (SetDelay) and, while Hold is on, does not
// finish until Release. Like PromptQueue (get, task_done), a prompt goes
// from the queue to the history in one step, under the fake's lock.
// Scripted replies (Fail) answer the next requests of a route.
type ComfyUI struct {
	Server *httptest.Server

	mu          sync.Mutex
	number      int
	queue       []*comfyJob          // queued and not finished, in order
	history     map[string]*comfyJob // finished, by prompt_id: the last run
	submissions map[string]int
	posts       int
	delay       time.Duration
	held        bool
	script      map[string][]Reply
	failExec    []string
	onSubmit    func(promptID string)
	images      map[string][]byte // by filename
	down        bool
}

type comfyJob struct {
	id       string
	number   int
	prompt   map[string]comfyNode
	outputs  []string
	start    time.Time
	failWith string
	extra    map[string]any // extra_data: the client_id
	image    string         // filename
}

type comfyNode struct {
	ClassType string         `json:"class_type"`
	Inputs    map[string]any `json:"inputs"`
}

// comfyClasses are the node classes the fake knows; the true ones are
// output nodes.
var comfyClasses = map[string]bool{
	"CheckpointLoaderSimple": false, "CLIPTextEncode": false, "EmptyLatentImage": false,
	"KSampler": false, "VAEDecode": false, "SaveImage": true, "PreviewImage": true,
}

// NewComfyUI starts a fake ComfyUI. Close it with Server.Close.
func NewComfyUI() *ComfyUI {
	f := &ComfyUI{history: map[string]*comfyJob{}, submissions: map[string]int{},
		script: map[string][]Reply{}, images: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /prompt", f.postPrompt)
	mux.HandleFunc("GET /queue", f.getQueue)
	mux.HandleFunc("POST /queue", f.postQueue)
	mux.HandleFunc("GET /history/{id}", f.getHistory)
	mux.HandleFunc("POST /history", f.postHistory)
	mux.HandleFunc("GET /view", f.view)
	mux.HandleFunc("GET /system_stats", f.systemStats)
	f.Server = httptest.NewServer(downable(&f.mu, &f.down, mux))
	return f
}

// downable answers nothing while *down: it closes the connection.
func downable(mu *sync.Mutex, down *bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		d := *down
		mu.Unlock()
		if d {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		h.ServeHTTP(w, r)
	})
}

// SetDown makes the server answer nothing (on) or answer again (off).
func (f *ComfyUI) SetDown(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = on
}

// Restart loses every queued prompt and the whole history, as a ComfyUI
// restart does; output files stay.
func (f *ComfyUI) Restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = nil
	f.history = map[string]*comfyJob{}
}

// DeleteOutputs removes every image file (the output folder emptied); the
// history still names them.
func (f *ComfyUI) DeleteOutputs() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	f.images = map[string][]byte{}
}

// BaseURL is the base_url a catalog gives for this fake.
func (f *ComfyUI) BaseURL() string { return f.Server.URL }

// SetDelay makes each prompt run for d.
func (f *ComfyUI) SetDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// Hold keeps every prompt running until Release.
func (f *ComfyUI) Hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = true
}

// Release lets held prompts finish.
func (f *ComfyUI) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = false
}

// Fail scripts the answers to the next requests of a route: "prompt"
// (POST /prompt), "queue", "history" or "view".
func (f *ComfyUI) Fail(route string, replies ...Reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script[route] = append(f.script[route], replies...)
}

// FailNextExecution makes the next prompts submitted fail while they run,
// with ComfyUI's execution_error carrying msg.
func (f *ComfyUI) FailNextExecution(msg ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failExec = append(f.failExec, msg...)
}

// OnSubmit makes fn run on each prompt taken by POST /prompt, before the
// answer is written (a test may kill its client there: the prompt is
// queued, the client never hears of it). fn runs with the fake locked:
// it must not call the fake.
func (f *ComfyUI) OnSubmit(fn func(promptID string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onSubmit = fn
}

// Submissions is how many times POST /prompt queued each prompt_id.
func (f *ComfyUI) Submissions() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.submissions))
	for k, v := range f.submissions {
		out[k] = v
	}
	return out
}

// Posts is how many POST /prompt requests came, refused ones included.
func (f *ComfyUI) Posts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.posts
}

// Running lists the prompt_ids queued and not finished.
func (f *ComfyUI) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	var out []string
	for _, j := range f.queue {
		out = append(out, j.id)
	}
	return out
}

// ComfyImage is the PNG the fake makes for a prompt text and a seed at a
// size.
func ComfyImage(text string, seed int64, w, h int) []byte {
	return makePNG(fmt.Sprintf("comfyui\x00%s\x00%d", text, seed), w, h)
}

// ImageOf is the image the fake made for a prompt_id, nil when none.
func (f *ComfyUI) ImageOf(promptID string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	if j, ok := f.history[promptID]; ok && j.image != "" {
		return f.images[j.image]
	}
	return nil
}

func (f *ComfyUI) scripted(w http.ResponseWriter, route string) bool {
	f.mu.Lock()
	var r *Reply
	if len(f.script[route]) > 0 {
		r = &f.script[route][0]
		f.script[route] = f.script[route][1:]
	}
	f.mu.Unlock()
	if r == nil {
		return false
	}
	writeRetryAfter(w, *r)
	if r.Type != "" || r.Message != "" {
		writeJSON(w, r.Status, map[string]any{
			"error":       map[string]any{"type": r.Type, "message": r.Message, "details": "", "extra_info": map[string]any{}},
			"node_errors": map[string]any{},
		})
		return true
	}
	w.WriteHeader(r.Status)
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func promptError(typ, msg, details string, nodeErrors map[string]any) map[string]any {
	return map[string]any{
		"error":       map[string]any{"type": typ, "message": msg, "details": details, "extra_info": map[string]any{}},
		"node_errors": nodeErrors,
	}
}

func (f *ComfyUI) postPrompt(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.posts++
	f.mu.Unlock()
	if f.scripted(w, "prompt") {
		return
	}
	var in struct {
		Prompt   map[string]comfyNode `json:"prompt"`
		PromptID *string              `json:"prompt_id"`
		ClientID *string              `json:"client_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, promptError("invalid_prompt", "Invalid prompt", err.Error(), map[string]any{}))
		return
	}
	if in.PromptID != nil && !canonicalUUID.MatchString(*in.PromptID) {
		writeJSON(w, http.StatusBadRequest, promptError("invalid_prompt_id", "Invalid prompt_id format",
			fmt.Sprintf("prompt_id must be a valid UUID, got %q", *in.PromptID), map[string]any{}))
		return
	}
	if in.Prompt == nil {
		writeJSON(w, http.StatusBadRequest, promptError("no_prompt", "No prompt provided", "No prompt provided", map[string]any{}))
		return
	}
	var outputs []string
	for id, n := range in.Prompt {
		out, ok := comfyClasses[n.ClassType]
		if !ok {
			writeJSON(w, http.StatusBadRequest, promptError("invalid_prompt",
				fmt.Sprintf("Cannot execute because node %s does not exist.", n.ClassType), "Node ID '#"+id+"'", map[string]any{}))
			return
		}
		if out {
			outputs = append(outputs, id)
		}
	}
	if len(outputs) == 0 {
		writeJSON(w, http.StatusBadRequest, promptError("prompt_no_outputs", "Prompt has no outputs", "", map[string]any{}))
		return
	}
	nodeErrors := map[string]any{}
	for id, n := range in.Prompt {
		if n.ClassType == "CLIPTextEncode" {
			if _, ok := n.Inputs["text"].(string); !ok {
				nodeErrors[id] = map[string]any{"class_type": n.ClassType, "dependent_outputs": outputs,
					"errors": []any{map[string]any{"type": "required_input_missing", "message": "Required input is missing", "details": "text", "extra_info": map[string]any{"input_name": "text"}}}}
			}
		}
	}
	if len(nodeErrors) > 0 {
		writeJSON(w, http.StatusBadRequest, promptError("prompt_outputs_failed_validation", "Prompt outputs failed validation", "Required input is missing: text", nodeErrors))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := uuid.NewString()
	if in.PromptID != nil {
		id = *in.PromptID
	}
	f.number++
	j := &comfyJob{id: id, number: f.number, prompt: in.Prompt, outputs: outputs, start: time.Now(), extra: map[string]any{}}
	if in.ClientID != nil { // server.py: extra_data["client_id"] only when given
		j.extra["client_id"] = *in.ClientID
	}
	if len(f.failExec) > 0 {
		j.failWith, f.failExec = f.failExec[0], f.failExec[1:]
	}
	f.queue = append(f.queue, j)
	f.submissions[id]++
	if f.onSubmit != nil {
		f.onSubmit(id)
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt_id": id, "number": j.number, "node_errors": map[string]any{}})
}

// advance finishes the jobs whose time has come (not while held): each
// leaves the queue and becomes its prompt_id's history entry.
func (f *ComfyUI) advance() {
	if f.held {
		return
	}
	queued := f.queue[:0]
	for _, j := range f.queue {
		if time.Since(j.start) < f.delay {
			queued = append(queued, j)
			continue
		}
		f.history[j.id] = j
		if j.failWith != "" {
			continue
		}
		text, seed, w, h := "", int64(0), 512, 512
		for _, n := range j.prompt {
			switch n.ClassType {
			case "KSampler":
				if v, ok := n.Inputs["seed"].(float64); ok {
					seed = int64(v)
				}
				// The positive conditioning is a link [node id, output].
				if link, ok := n.Inputs["positive"].([]any); ok && len(link) > 0 {
					if from, ok := link[0].(string); ok {
						text, _ = j.prompt[from].Inputs["text"].(string)
					}
				}
			case "EmptyLatentImage":
				if v, ok := n.Inputs["width"].(float64); ok {
					w = int(v)
				}
				if v, ok := n.Inputs["height"].(float64); ok {
					h = int(v)
				}
			}
		}
		j.image = fmt.Sprintf("studio_%05d_.png", j.number)
		f.images[j.image] = ComfyImage(text, seed, w, h)
	}
	clear(f.queue[len(queued):])
	f.queue = queued
}

// canonicalUUID is the form of prompt_id the server takes: a UUID in
// lowercase hex, 8-4-4-4-12.
var canonicalUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func (f *ComfyUI) postQueue(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Clear  bool     `json:"clear"`
		Delete []string `json:"delete"`
	}
	json.NewDecoder(r.Body).Decode(&in)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	if in.Clear && len(f.queue) > 1 { // wipe_queue: the pending ones, not the running one
		f.queue = f.queue[:1]
	}
	w.WriteHeader(http.StatusOK)
}

func (f *ComfyUI) postHistory(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Clear  bool     `json:"clear"`
		Delete []string `json:"delete"`
	}
	json.NewDecoder(r.Body).Decode(&in)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	if in.Clear {
		f.history = map[string]*comfyJob{}
	}
	for _, id := range in.Delete {
		delete(f.history, id)
	}
	w.WriteHeader(http.StatusOK)
}

func (f *ComfyUI) systemStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"system":  map[string]any{"os": "posix", "comfyui_version": "fake", "python_version": "3", "embedded_python": false},
		"devices": []any{map[string]any{"name": "cpu", "type": "cpu", "index": nil, "vram_total": 0, "vram_free": 0}},
	})
}

func (j *comfyJob) item() []any {
	return []any{j.number, j.id, j.prompt, j.extra, j.outputs}
}

func (f *ComfyUI) getQueue(w http.ResponseWriter, r *http.Request) {
	if f.scripted(w, "queue") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	running, pending := []any{}, []any{}
	for i, j := range f.queue {
		if i == 0 {
			running = append(running, j.item())
		} else {
			pending = append(pending, j.item())
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue_running": running, "queue_pending": pending})
}

func (f *ComfyUI) getHistory(w http.ResponseWriter, r *http.Request) {
	if f.scripted(w, "history") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	id := r.PathValue("id")
	j, ok := f.history[id]
	if !ok {
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	start := []any{"execution_start", map[string]any{"prompt_id": id, "timestamp": j.start.UnixMilli()}}
	entry := map[string]any{"prompt": j.item(), "meta": map[string]any{}}
	if j.failWith != "" {
		entry["outputs"] = map[string]any{}
		entry["status"] = map[string]any{"status_str": "error", "completed": false, "messages": []any{start,
			[]any{"execution_error", map[string]any{"prompt_id": id, "node_id": "3", "node_type": "KSampler",
				"executed": []string{}, "exception_message": j.failWith, "exception_type": "RuntimeError",
				"traceback": []string{"Traceback (most recent call last):\n"}, "current_inputs": map[string]any{}, "current_outputs": map[string]any{}}}}}
	} else {
		outputs := map[string]any{}
		for _, o := range j.outputs {
			outputs[o] = map[string]any{"images": []any{map[string]any{"filename": j.image, "subfolder": "", "type": "output"}}}
		}
		entry["outputs"] = outputs
		entry["status"] = map[string]any{"status_str": "success", "completed": true, "messages": []any{start,
			[]any{"execution_success", map[string]any{"prompt_id": id, "timestamp": time.Now().UnixMilli()}}}}
	}
	writeJSON(w, http.StatusOK, map[string]any{id: entry})
}

func (f *ComfyUI) view(w http.ResponseWriter, r *http.Request) {
	if f.scripted(w, "view") {
		return
	}
	q := r.URL.Query()
	name := q.Get("filename")
	if name == "" || name[0] == '/' || strings.Contains(name, "..") {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	typ := "output" // server.py: request.rel_url.query.get("type", "output")
	if q.Has("type") {
		typ = q.Get("type")
	}
	if typ != "output" && typ != "input" && typ != "temp" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	b, ok := f.images[name]
	f.mu.Unlock()
	if !ok || typ != "output" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Disposition", `filename="`+name+`"`)
	w.Write(b)
}
