package generator

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"
)

// Kinds of generators a catalog may name besides KindEmbedded.
const (
	// KindOpenAI is a server that speaks the OpenAI Images API.
	KindOpenAI = "openai"
	// KindComfyUI is a ComfyUI server running a workflow in API format.
	KindComfyUI = "comfyui"
)

// Kinds lists the generator kinds a catalog may name.
func Kinds() []string { return []string{KindEmbedded, KindOpenAI, KindComfyUI} }

// Duration is a time.Duration written as Go writes one ("180s", "1m30s")
// in a catalog.
type Duration time.Duration

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration (write it like \"180s\" or \"1m30s\"): %q", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as Go does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// Spec is one generator of a catalog, as the catalog file writes it (the
// members other than id and kind belong to the remote kinds; see
// docs/catalog.md).
type Spec struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`

	// BaseURL is the provider's address: for openai the API root that
	// /images/generations is under (https://api.openai.com/v1), for
	// comfyui the server's root (http://127.0.0.1:8188).
	BaseURL string `json:"base_url,omitzero"`
	// APIKeyEnv names the environment variable holding the key sent as
	// "Authorization: Bearer <key>". Empty: no key is sent. The key itself
	// is never in the catalog.
	APIKeyEnv string `json:"api_key_env,omitzero"`
	// PromptTemplate is a Go text/template over PromptData; empty means
	// the request's prompt.
	PromptTemplate string `json:"prompt_template,omitzero"`
	// Timeout bounds every call to the provider (openai), or one wait for
	// a prompt to finish (comfyui, whose calls are bounded by the smaller
	// of it and 60s). Zero: the kind's default.
	Timeout Duration `json:"timeout,omitzero"`

	// Model and Size are the openai kind's model and default image size.
	Model string `json:"model,omitzero"`
	Size  string `json:"size,omitzero"`

	// Workflow is the comfyui kind's workflow file in ComfyUI's API
	// format; a relative path is relative to the catalog file (the planner
	// resolves it before it hands the spec on).
	Workflow string `json:"workflow,omitzero"`
	// Inputs maps prompt, seed, width and height to the workflow fields
	// that take them, each as "node.inputs.field".
	Inputs map[string]string `json:"inputs,omitzero"`
	// OutputNode is the id of the workflow node whose first image is the
	// result.
	OutputNode string `json:"output_node,omitzero"`
	// PollInterval is how often Wait asks ComfyUI for the prompt's history.
	PollInterval Duration `json:"poll_interval,omitzero"`

	// Sizes are the sizes ("WxH") the generator takes, checked when a
	// batch is planned: ["any"] for a server that takes any size; empty:
	// the known model's sizes (openai), any (comfyui).
	Sizes []string `json:"sizes,omitzero"`
	// SizeMismatch is what to do with an image of another size than
	// asked: "warn" (kept, noted in the task's history; the default) or
	// "refuse" (thrown away, the task failed).
	SizeMismatch string `json:"size_mismatch,omitzero"`
}

// members lists the members a spec sets besides id and kind, by name.
func (s Spec) members() []string {
	var out []string
	add := func(name string, set bool) {
		if set {
			out = append(out, name)
		}
	}
	add("base_url", s.BaseURL != "")
	add("api_key_env", s.APIKeyEnv != "")
	add("prompt_template", s.PromptTemplate != "")
	add("timeout", s.Timeout != 0)
	add("model", s.Model != "")
	add("size", s.Size != "")
	add("workflow", s.Workflow != "")
	add("inputs", s.Inputs != nil)
	add("output_node", s.OutputNode != "")
	add("poll_interval", s.PollInterval != 0)
	add("sizes", s.Sizes != nil)
	add("size_mismatch", s.SizeMismatch != "")
	return out
}

// kindMembers are the members each kind allows besides id and kind.
var kindMembers = map[string][]string{
	KindEmbedded: nil,
	KindOpenAI:   {"base_url", "api_key_env", "prompt_template", "timeout", "model", "size", "sizes", "size_mismatch"},
	KindComfyUI:  {"base_url", "api_key_env", "prompt_template", "timeout", "workflow", "inputs", "output_node", "poll_interval", "sizes", "size_mismatch"},
}

// CallObserver hears of every call a remote generator makes to its
// provider: the generator's id, the call (one of a small fixed set per
// kind: generate, download; submit, history, queue, view), the error class
// ("" on success) and how long it took.
type CallObserver func(generator, call, class string, d time.Duration)

// Options are what building a remote generator needs from the process.
// The zero value reads the real environment and uses a default client.
type Options struct {
	// LookupEnv reads api_key_env; os.LookupEnv when nil.
	LookupEnv func(string) (string, bool)
	// Observe, when set, hears of every provider call.
	Observe CallObserver
	// Transport carries the provider calls; http.DefaultTransport's clone
	// when nil.
	Transport http.RoundTripper
}

func (o Options) lookupEnv(name string) (string, bool) {
	if o.LookupEnv != nil {
		return o.LookupEnv(name)
	}
	return os.LookupEnv(name)
}

func (o Options) observe(gen, call, class string, d time.Duration) {
	if o.Observe != nil {
		o.Observe(gen, call, class, d)
	}
}

// CheckSpec reports whether studio can build the generator a catalog
// names: a known kind, only the members of that kind, and for the remote
// kinds everything New checks (URL, template, workflow and its nodes, the
// key variable set), without any network call. Its error says what is
// wrong and never holds a key.
func CheckSpec(s Spec) error {
	_, err := NewWith(Options{}, s)
	return err
}

// New builds the generator of a spec, reading keys from the environment.
func New(s Spec) (Generator, error) { return NewWith(Options{}, s) }

// NewWith builds the generator of a spec with the given options.
func NewWith(o Options, s Spec) (Generator, error) {
	allowed, ok := kindMembers[s.Kind]
	if !ok {
		return nil, fmt.Errorf("generator %q: unknown kind %q (known: %q)", s.ID, s.Kind, Kinds())
	}
	for _, m := range s.members() {
		if !slices.Contains(allowed, m) {
			return nil, fmt.Errorf("generator %q: %s is not a member of kind %q", s.ID, m, s.Kind)
		}
	}
	if err := checkSizes(s); err != nil {
		return nil, err
	}
	switch s.Kind {
	case KindOpenAI:
		return newOpenAI(o, s)
	case KindComfyUI:
		return newComfyUI(o, s)
	}
	switch s.ID {
	case Sketch:
		return NewSketch(), nil
	case Mosaic:
		return NewMosaic(), nil
	case Noop:
		return NewNoop(), nil
	}
	return nil, fmt.Errorf("generator %q: no embedded generator has this id (known: %v)", s.ID, EmbeddedIDs())
}

// Registry holds the generators of a catalog by id. It is read-only after
// NewRegistry, so any number of workers may share it.
type Registry struct {
	byID map[string]Generator
	ids  []string
}

// NewRegistry builds every generator of a catalog. Ids must be distinct.
func NewRegistry(specs ...Spec) (*Registry, error) { return NewRegistryWith(Options{}, specs...) }

// NewRegistryWith builds every generator of a catalog with the given
// options. Ids must be distinct.
func NewRegistryWith(o Options, specs ...Spec) (*Registry, error) {
	r := &Registry{byID: make(map[string]Generator, len(specs))}
	for _, s := range specs {
		if _, dup := r.byID[s.ID]; dup {
			return nil, fmt.Errorf("new registry: generator %q listed twice", s.ID)
		}
		g, err := NewWith(o, s)
		if err != nil {
			return nil, fmt.Errorf("new registry: %w", err)
		}
		r.byID[s.ID] = g
		r.ids = append(r.ids, s.ID)
	}
	return r, nil
}

// Get returns the generator with the id. A task naming a generator the
// registry lacks cannot run here; Get's error says so and is permanent.
func (r *Registry) Get(id string) (Generator, error) {
	g, ok := r.byID[id]
	if !ok {
		return nil, Permanent(fmt.Errorf("generator %q is not in the catalog", id))
	}
	return g, nil
}

// IDs lists the generators' ids in catalog order.
func (r *Registry) IDs() []string { return slices.Clone(r.ids) }
