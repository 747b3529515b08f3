package generator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Defaults of the comfyui kind.
const (
	DefaultComfyTimeout      = 600 * time.Second
	DefaultComfyPollInterval = time.Second
	// comfyQueueCheckEvery: while the history of a prompt is empty, Wait
	// looks the prompt up in the queue every this many polls, to notice a
	// prompt the server lost (a restart, a cleared queue).
	comfyQueueCheckEvery = 5
	// comfyPollErrors is how many poll calls in a row may fail (transient)
	// before Wait gives up on this attempt.
	comfyPollErrors = 3
	// comfyCallTimeout bounds one call to ComfyUI (a poll, a submission,
	// an image) when the generator's timeout, which bounds the whole wait,
	// is longer.
	comfyCallTimeout = 60 * time.Second
	// comfyClientID is the client_id of studio's prompts.
	comfyClientID = "studio"
)

// Input names a comfyui generator's inputs may map.
const (
	ComfyInputPrompt = "prompt"
	ComfyInputSeed   = "seed"
	ComfyInputWidth  = "width"
	ComfyInputHeight = "height"
)

// ComfyInputs lists the input names a comfyui generator may map; prompt is
// required.
func ComfyInputs() []string {
	return []string{ComfyInputPrompt, ComfyInputSeed, ComfyInputWidth, ComfyInputHeight}
}

// comfyUI is a generator of kind comfyui. The task id is the prompt_id:
//
//   - Submit looks the prompt_id up in GET /queue, then in
//     GET /history/{id} (in that order, see Submit) and, only if the
//     server has it in neither, fills the workflow
//     (prompt, seed, width, height) and POSTs /prompt with that
//     prompt_id. A retry, or a worker that resumed another's task, finds
//     the prompt there and queues nothing.
//   - Wait polls GET /history/{id} until the prompt has its outputs, or
//     failed (permanent, with ComfyUI's message).
//   - Fetch reads the output node's first image through GET /view.
type comfyUI struct {
	id           string
	base         *url.URL
	workflow     []byte // the workflow file, checked
	inputs       map[string]comfyField
	outputNode   string
	pollInterval time.Duration
	waitTimeout  time.Duration
	prompt       promptTemplate
	c            *caller
	refuse       bool // size_mismatch: refuse
}

// comfyField is one "node.inputs.field" of a workflow.
type comfyField struct{ node, field string }

func (f comfyField) String() string { return f.node + ".inputs." + f.field }

func newComfyUI(o Options, s Spec) (*comfyUI, error) {
	u, err := checkBaseURL(s.ID, s.BaseURL)
	if err != nil {
		return nil, err
	}
	g := &comfyUI{id: s.ID, base: u, inputs: map[string]comfyField{}, outputNode: s.OutputNode,
		pollInterval: time.Duration(s.PollInterval), refuse: s.SizeMismatch == SizeMismatchRefuse}
	if g.pollInterval == 0 {
		g.pollInterval = DefaultComfyPollInterval
	}
	if g.pollInterval < 0 {
		return nil, fmt.Errorf("generator %q: poll_interval must be positive", s.ID)
	}
	if s.Workflow == "" {
		return nil, fmt.Errorf("generator %q: workflow is required (a ComfyUI workflow file in API format)", s.ID)
	}
	g.workflow, err = os.ReadFile(s.Workflow)
	if err != nil {
		return nil, fmt.Errorf("generator %q: workflow: %w", s.ID, err)
	}
	nodes, err := parseWorkflow(g.workflow)
	if err != nil {
		return nil, fmt.Errorf("generator %q: workflow %s: %w", s.ID, s.Workflow, err)
	}
	if _, ok := s.Inputs[ComfyInputPrompt]; !ok {
		return nil, fmt.Errorf("generator %q: inputs.prompt is required (where the prompt goes, as \"node.inputs.field\")", s.ID)
	}
	names := make([]string, 0, len(s.Inputs))
	for name := range s.Inputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		path := s.Inputs[name]
		if !slices.Contains(ComfyInputs(), name) {
			return nil, fmt.Errorf("generator %q: inputs.%s: unknown input (known: %q)", s.ID, name, ComfyInputs())
		}
		node, field, ok := strings.Cut(path, ".inputs.")
		if !ok || node == "" || field == "" || strings.Contains(field, ".") {
			return nil, fmt.Errorf("generator %q: inputs.%s: %q is not like \"6.inputs.text\"", s.ID, name, path)
		}
		n, ok := nodes[node]
		if !ok {
			return nil, fmt.Errorf("generator %q: inputs.%s: workflow %s has no node %q", s.ID, name, s.Workflow, node)
		}
		if _, ok := n.inputs[field]; !ok {
			return nil, fmt.Errorf("generator %q: inputs.%s: node %q (%s) of workflow %s has no input %q", s.ID, name, node, n.classType, s.Workflow, field)
		}
		g.inputs[name] = comfyField{node: node, field: field}
	}
	if s.OutputNode == "" {
		return nil, fmt.Errorf("generator %q: output_node is required (the id of the node whose image is the result, like a SaveImage node)", s.ID)
	}
	if _, ok := nodes[s.OutputNode]; !ok {
		return nil, fmt.Errorf("generator %q: output_node: workflow %s has no node %q", s.ID, s.Workflow, s.OutputNode)
	}
	if g.prompt, err = parsePromptTemplate(s.PromptTemplate); err != nil {
		return nil, fmt.Errorf("generator %q: %w", s.ID, err)
	}
	if g.c, err = newCaller(o, s, DefaultComfyTimeout); err != nil {
		return nil, err
	}
	g.c.genCall = "submit"
	g.waitTimeout = g.c.timeout
	g.c.timeout = min(g.c.timeout, comfyCallTimeout)
	return g, nil
}

// workflowNode is what a check of a workflow reads of a node.
type workflowNode struct {
	classType string
	inputs    map[string]jsontext.Value
}

// parseWorkflow reads a workflow in ComfyUI's API format: an object of
// nodes by id, each with a class_type and an inputs object.
func parseWorkflow(data []byte) (map[string]workflowNode, error) {
	var raw map[string]struct {
		ClassType string                    `json:"class_type"`
		Inputs    map[string]jsontext.Value `json:"inputs"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a workflow in API format (an object of nodes, each with class_type and inputs; export it with \"Export (API)\"): %w", err)
	}
	if len(raw) == 0 {
		return nil, errors.New("the workflow has no nodes")
	}
	out := make(map[string]workflowNode, len(raw))
	for id, n := range raw {
		if n.ClassType == "" || n.Inputs == nil {
			return nil, fmt.Errorf("node %q has no class_type or no inputs: not the API format (export it with \"Export (API)\")", id)
		}
		out[id] = workflowNode{classType: n.ClassType, inputs: n.Inputs}
	}
	return out, nil
}

// ID implements Generator.
func (g *comfyUI) ID() string { return g.id }

// RefusesOtherSizes implements SizeRefuser.
func (g *comfyUI) RefusesOtherSizes() bool { return g.refuse }

func (g *comfyUI) url(path string, query url.Values) string {
	u := *g.base
	u.Path += path
	if query != nil {
		u.RawQuery = query.Encode()
	}
	return u.String()
}

func (g *comfyUI) get(ctx context.Context, call, path string, query url.Values) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, g.url(path, query), nil)
	if err != nil {
		return nil, Permanent(err)
	}
	_, body, err := g.c.do(ctx, call, req, true, comfyErrorMessage)
	return body, err
}

// comfyEntry is a prompt's entry in GET /history/{prompt_id}.
type comfyEntry struct {
	Outputs map[string]struct {
		Images []comfyImage `json:"images"`
	} `json:"outputs"`
	Status *struct {
		StatusStr string           `json:"status_str"`
		Completed bool             `json:"completed"`
		Messages  []jsontext.Value `json:"messages"`
	} `json:"status"`
}

// comfyImage is one image of a node's outputs, as /view takes it.
type comfyImage struct {
	Filename  string `json:"filename"`
	Subfolder string `json:"subfolder"`
	Type      string `json:"type"`
}

// history answers the prompt's history entry, nil when the server has
// none (yet).
func (g *comfyUI) history(ctx context.Context, id string) (*comfyEntry, error) {
	body, err := g.get(ctx, "history", "/history/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	var h map[string]comfyEntry
	if err := json.Unmarshal(body, &h); err != nil {
		return nil, g.c.protocolError("history", "the answer is not a history object: %v", err)
	}
	e, ok := h[id]
	if !ok {
		return nil, nil
	}
	return &e, nil
}

// queued reports whether the prompt is running or pending in GET /queue,
// whose items are [number, prompt_id, prompt, extra_data, outputs, ...].
func (g *comfyUI) queued(ctx context.Context, id string) (bool, error) {
	body, err := g.get(ctx, "queue", "/queue", nil)
	if err != nil {
		return false, err
	}
	var q struct {
		Running []jsontext.Value `json:"queue_running"`
		Pending []jsontext.Value `json:"queue_pending"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return false, g.c.protocolError("queue", "the answer is not a queue object: %v", err)
	}
	for _, item := range append(q.Running, q.Pending...) {
		var fields []jsontext.Value
		if err := json.Unmarshal(item, &fields); err != nil || len(fields) < 2 {
			return false, g.c.protocolError("queue", "a queue item is not [number, prompt_id, ...]")
		}
		var pid string
		if json.Unmarshal(fields[1], &pid) == nil && pid == id {
			return true, nil
		}
	}
	return false, nil
}

// Submit implements Generator. It queues the prompt only when the server
// has it neither in its queue nor in its history.
//
// The queue is looked up first. ComfyUI moves a prompt from the queue
// (pending, then running) to the history in one step under one lock
// (execution.py, PromptQueue.get and task_done), and only that way; but
// the two GETs are apart. Looked up in the history first, a prompt that
// finishes between the two answers is in neither, and would be queued a
// second time. Looked up in the queue first, a prompt that is not there
// has either finished already, and is in the history by the second GET,
// or was never queued.
func (g *comfyUI) Submit(ctx context.Context, job Job) (string, error) {
	id := job.Key
	if q, err := g.queued(ctx, id); err != nil {
		return "", err
	} else if q {
		return id, nil
	}
	if h, err := g.history(ctx, id); err != nil {
		return "", err
	} else if h != nil {
		return id, nil
	}
	wf, err := g.fill(job)
	if err != nil {
		return "", err
	}
	body, err := json.Marshal(struct {
		Prompt   jsontext.Value `json:"prompt"`
		PromptID string         `json:"prompt_id"`
		ClientID string         `json:"client_id"`
	}{wf, id, comfyClientID})
	if err != nil {
		return "", Permanent(err)
	}
	req, err := http.NewRequest(http.MethodPost, g.url("/prompt", nil), bytes.NewReader(body))
	if err != nil {
		return "", Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	_, answer, err := g.c.do(ctx, "submit", req, true, comfyErrorMessage)
	if err != nil {
		return "", err
	}
	var out struct {
		PromptID string `json:"prompt_id"`
	}
	if err := json.Unmarshal(answer, &out); err != nil || out.PromptID == "" {
		return "", g.c.protocolError("submit", "the answer has no prompt_id")
	}
	// A server too old to take a caller's prompt_id names its own; the
	// reference is then that id (and a crash before it is recorded may
	// queue the prompt again).
	return out.PromptID, nil
}

// fill sets the prompt, seed, width and height of a job into a fresh copy
// of the workflow.
func (g *comfyUI) fill(job Job) (jsontext.Value, error) {
	prompt, err := g.prompt.render(job)
	if err != nil {
		return nil, fmt.Errorf("generator %q: %w", g.id, err)
	}
	values := map[string]any{ComfyInputPrompt: prompt, ComfyInputSeed: TaskSeed(job)}
	members, err := decodeObject(job.Params)
	if err != nil {
		return nil, Permanent(fmt.Errorf("generator %q: %w", g.id, err))
	}
	for _, name := range []string{ComfyInputWidth, ComfyInputHeight} {
		if v, ok := members[name]; ok {
			n, ok := intValue(v)
			if !ok || n < MinSize || n > MaxSize {
				return nil, Permanent(fmt.Errorf("generator %q: params.%s must be an integer from %d to %d", g.id, name, MinSize, MaxSize))
			}
			values[name] = n
		}
	}
	var nodes map[string]map[string]jsontext.Value
	if err := json.Unmarshal(g.workflow, &nodes); err != nil {
		return nil, Permanent(fmt.Errorf("generator %q: workflow: %w", g.id, err))
	}
	for name, f := range g.inputs {
		v, ok := values[name]
		if !ok {
			continue // width or height not asked for: the workflow's own
		}
		var inputs map[string]jsontext.Value
		if err := json.Unmarshal(nodes[f.node]["inputs"], &inputs); err != nil {
			return nil, Permanent(fmt.Errorf("generator %q: workflow node %q: %w", g.id, f.node, err))
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, Permanent(err)
		}
		inputs[f.field] = b
		if nodes[f.node]["inputs"], err = json.Marshal(inputs, json.Deterministic(true)); err != nil {
			return nil, Permanent(err)
		}
	}
	out, err := json.Marshal(nodes, json.Deterministic(true))
	if err != nil {
		return nil, Permanent(err)
	}
	return out, nil
}

// Wait implements Generator: it polls the history every poll_interval
// until the prompt is done, for at most the generator's timeout.
func (g *comfyUI) Wait(ctx context.Context, ref string) error {
	deadline := time.Now().Add(g.waitTimeout)
	empty, failures := 0, 0
	for {
		h, err := g.history(ctx, ref)
		if err == nil && h == nil {
			empty++
			if empty%comfyQueueCheckEvery == 1 {
				var lost error
				if h, lost, err = g.checkQueued(ctx, ref); lost != nil {
					return lost
				}
			}
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && IsPermanent(err):
			return err
		case err != nil:
			failures++
			if failures >= comfyPollErrors {
				return err
			}
		case h != nil:
			return g.done(ref, h)
		default:
			failures = 0
		}
		if !time.Now().Before(deadline) {
			return &ProviderError{Generator: g.id, Class: ClassTimeout,
				Message: fmt.Sprintf("prompt %s did not finish within %s (it stays queued; the next try waits for it again)", ref, g.waitTimeout)}
		}
		pause := g.pollInterval
		if d, ok := RetryAfter(err); ok {
			pause = max(pause, d) // a poll answered 429 or 503 with Retry-After
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// checkQueued looks for a prompt whose history is empty in the queue and
// then (as it may have just finished) in the history again: it answers
// the history entry if there is one now, or lost when the server has the
// prompt nowhere (an error of this attempt: the next one submits again).
func (g *comfyUI) checkQueued(ctx context.Context, id string) (h *comfyEntry, lost, err error) {
	q, err := g.queued(ctx, id)
	if err != nil || q {
		return nil, nil, err
	}
	if h, err = g.history(ctx, id); err != nil || h != nil {
		return h, nil, err
	}
	return nil, &LostError{Reason: ReasonLost, Err: &ProviderError{Generator: g.id, Class: ClassUnavailable,
		Message: fmt.Sprintf("prompt %s is neither queued nor in the history (the server restarted, or its queue was cleared); it is submitted again under the same prompt_id", id)}}, nil
}

// done reads a finished history entry: nil when the output node has an
// image, a permanent error when the prompt failed or has none.
func (g *comfyUI) done(id string, h *comfyEntry) error {
	if h.Status != nil && h.Status.StatusStr == "error" {
		return &ProviderError{Generator: g.id, Class: ClassRejected, Permanent: true,
			Message: "prompt " + id + " failed: " + g.c.scrub(executionError(h.Status.Messages))}
	}
	if _, err := g.outputImage(id, h); err != nil {
		return err
	}
	return nil
}

// outputImage is the output node's first image.
func (g *comfyUI) outputImage(id string, h *comfyEntry) (comfyImage, error) {
	out, ok := h.Outputs[g.outputNode]
	if !ok || len(out.Images) == 0 {
		return comfyImage{}, &ProviderError{Generator: g.id, Class: ClassRejected, Permanent: true,
			Message: fmt.Sprintf("prompt %s finished without an image from output_node %q", id, g.outputNode)}
	}
	return out.Images[0], nil
}

// executionError reads ComfyUI's execution_error (or execution_interrupted)
// message from a status's messages, each [event, data].
func executionError(messages []jsontext.Value) string {
	for _, m := range messages {
		var ev []jsontext.Value
		if json.Unmarshal(m, &ev) != nil || len(ev) < 2 {
			continue
		}
		var name string
		json.Unmarshal(ev[0], &name)
		var data struct {
			NodeID           string `json:"node_id"`
			NodeType         string `json:"node_type"`
			ExceptionType    string `json:"exception_type"`
			ExceptionMessage string `json:"exception_message"`
		}
		json.Unmarshal(ev[1], &data)
		switch name {
		case "execution_error":
			return fmt.Sprintf("node %s (%s): %s: %s", data.NodeID, data.NodeType, data.ExceptionType, strings.TrimSpace(data.ExceptionMessage))
		case "execution_interrupted":
			return fmt.Sprintf("interrupted at node %s (%s)", data.NodeID, data.NodeType)
		}
	}
	return "execution failed"
}

// Fetch implements Generator: the output node's first image, through
// GET /view?filename=...&subfolder=...&type=.... A prompt the history no
// longer holds, or an image /view no longer has (404), is a *LostError:
// the prompt's history entry is deleted (POST /history {"delete"}) so that
// the next Submit queues it again under the same prompt_id.
func (g *comfyUI) Fetch(ctx context.Context, ref string) (Image, error) {
	h, err := g.history(ctx, ref)
	if err != nil {
		return Image{}, err
	}
	if h == nil {
		return Image{}, &LostError{Reason: ReasonLost, Err: &ProviderError{Generator: g.id, Class: ClassUnavailable,
			Message: fmt.Sprintf("prompt %s is no longer in the history (the server restarted, or its history was cleared); it is submitted again under the same prompt_id", ref)}}
	}
	if err := g.done(ref, h); err != nil {
		return Image{}, err
	}
	im, _ := g.outputImage(ref, h)
	q := url.Values{"filename": {im.Filename}, "subfolder": {im.Subfolder}}
	if im.Type != "" { // ComfyUI takes "output" when type is absent, not when empty
		q.Set("type", im.Type)
	}
	body, err := g.get(ctx, "view", "/view", q)
	var pe *ProviderError
	if errors.As(err, &pe) && pe.Status == http.StatusNotFound {
		if err := g.forget(ctx, ref); err != nil {
			return Image{}, err
		}
		return Image{}, &LostError{Reason: ReasonLost, Err: &ProviderError{Generator: g.id, Class: ClassUnavailable, Status: pe.Status,
			Message: fmt.Sprintf("view: the image %q of prompt %s is gone (404); the prompt is submitted again under the same prompt_id", im.Filename, ref)}}
	}
	if err != nil {
		return Image{}, err
	}
	return imageOf(g.c, "view", body)
}

// forget deletes a prompt's history entry: POST /history {"delete": [id]}.
func (g *comfyUI) forget(ctx context.Context, id string) error {
	body, err := json.Marshal(map[string][]string{"delete": {id}})
	if err != nil {
		return Permanent(err)
	}
	req, err := http.NewRequest(http.MethodPost, g.url("/history", nil), bytes.NewReader(body))
	if err != nil {
		return Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	_, _, err = g.c.do(ctx, "forget", req, true, comfyErrorMessage)
	return err
}

// Probe implements Prober: GET /system_stats, which ComfyUI answers as
// soon as its server runs.
func (g *comfyUI) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := g.get(ctx, "probe", "/system_stats", nil)
	return err
}

// comfyErrorMessage reads POST /prompt's error answer,
// {"error": {"type", "message", "details", "extra_info"} | "text",
// "node_errors": {id: {"errors": [{"message", "details"}], "class_type"}}}:
// the message and details, then each node's errors.
func comfyErrorMessage(body []byte) (string, string) {
	var e struct {
		Error      jsontext.Value `json:"error"`
		NodeErrors jsontext.Value `json:"node_errors"` // an object, or [] when there are none
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 {
		return plainMessage(body), ""
	}
	var nodeErrors map[string]struct {
		ClassType string `json:"class_type"`
		Errors    []struct {
			Message string `json:"message"`
			Details string `json:"details"`
		} `json:"errors"`
	}
	json.Unmarshal(e.NodeErrors, &nodeErrors)
	var parts []string
	var obj struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Details string `json:"details"`
	}
	var text string
	switch {
	case json.Unmarshal(e.Error, &obj) == nil:
		parts = append(parts, strings.TrimSpace(strings.Join(nonEmpty(obj.Message, obj.Details), ": ")))
	case json.Unmarshal(e.Error, &text) == nil:
		parts = append(parts, text)
	}
	ids := make([]string, 0, len(nodeErrors))
	for id := range nodeErrors {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareNodeIDs)
	for _, id := range ids {
		ne := nodeErrors[id]
		for _, x := range ne.Errors {
			parts = append(parts, fmt.Sprintf("node %s (%s): %s", id, ne.ClassType, strings.Join(nonEmpty(x.Message, x.Details), ": ")))
		}
	}
	return strings.Join(nonEmpty(parts...), "; "), obj.Type
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// compareNodeIDs orders node ids numerically when both are numbers.
func compareNodeIDs(a, b string) int {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return x - y
	}
	return strings.Compare(a, b)
}
