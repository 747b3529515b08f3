package generator

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"studio/intent"
)

// Defaults of the openai kind.
const (
	DefaultOpenAISize    = "1024x1024"
	DefaultOpenAITimeout = 180 * time.Second
)

// openAI is a generator of kind openai: the OpenAI Images API
// (POST {base_url}/images/generations) and the servers that speak it.
//
// The API makes the image in one synchronous call, so the steps are:
// Submit renders the prompt and the size into the reference (no network
// call: the reference is all a worker in another process needs); Produce
// (the wait step) makes the call, under the task id as Idempotency-Key,
// and answers data[0].b64_json's bytes, or a reference to data[0].url with
// its expiry, which the worker records; Fetch downloads that URL, as often
// as it takes, and only a URL that expired or that its host says is gone
// leads back to Produce.
type openAI struct {
	id       string
	endpoint string
	model    string
	size     string
	prompt   promptTemplate
	c        *caller
	refuse   bool // size_mismatch: refuse
}

func newOpenAI(o Options, s Spec) (*openAI, error) {
	u, err := checkBaseURL(s.ID, s.BaseURL)
	if err != nil {
		return nil, err
	}
	if s.Model == "" {
		return nil, fmt.Errorf("generator %q: model is required (for example \"gpt-image-1\")", s.ID)
	}
	size := s.Size
	if size == "" {
		size = DefaultOpenAISize
	}
	if strings.ContainsAny(size, " \t\r\n") {
		return nil, fmt.Errorf("generator %q: size %q is not like \"1024x1024\"", s.ID, size)
	}
	pt, err := parsePromptTemplate(s.PromptTemplate)
	if err != nil {
		return nil, fmt.Errorf("generator %q: %w", s.ID, err)
	}
	c, err := newCaller(o, s, DefaultOpenAITimeout)
	if err != nil {
		return nil, err
	}
	c.genCall = "generate"
	return &openAI{id: s.ID, endpoint: u.String() + "/images/generations", model: s.Model, size: size, prompt: pt, c: c,
		refuse: s.SizeMismatch == SizeMismatchRefuse}, nil
}

// ID implements Generator.
func (g *openAI) ID() string { return g.id }

// RefusesOtherSizes implements SizeRefuser.
func (g *openAI) RefusesOtherSizes() bool { return g.refuse }

// openAIRef is what an openai reference holds.
type openAIRef struct {
	Key    string `json:"key"`
	Prompt string `json:"prompt"`
	Size   string `json:"size"`
}

const openAIRefPrefix = "openai:v1:"

// Submit implements Generator: it renders the prompt and the size into the
// reference. It calls nothing.
func (g *openAI) Submit(ctx context.Context, job Job) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	prompt, err := g.prompt.render(job)
	if err != nil {
		return "", fmt.Errorf("generator %q: %w", g.id, err)
	}
	size, err := requestSize(job.Params, g.size)
	if err != nil {
		return "", Permanent(fmt.Errorf("generator %q: %w", g.id, err))
	}
	b, err := json.Marshal(openAIRef{Key: job.Key, Prompt: prompt, Size: size})
	if err != nil {
		return "", Permanent(fmt.Errorf("generator %q: %w", g.id, err))
	}
	return openAIRefPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

func (g *openAI) parseRef(ref string) (openAIRef, error) {
	var r openAIRef
	raw, ok := strings.CutPrefix(ref, openAIRefPrefix)
	if !ok {
		return r, Permanent(fmt.Errorf("generator %q: %q is not an openai reference", g.id, trimRef(ref)))
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil || r.Key == "" {
		return r, Permanent(fmt.Errorf("generator %q: bad openai reference", g.id))
	}
	return r, nil
}

// Wait implements Generator: the image is made by Produce's call.
func (g *openAI) Wait(ctx context.Context, ref string) error {
	if _, err := g.parseRef(ref); err != nil {
		return err
	}
	return ctx.Err()
}

// openAIURLTTL is how long an image URL of the Images API serves: "URLs
// are only valid for 60 minutes after the image has been generated" (the
// API reference of "Create image", response_format).
const openAIURLTTL = 60 * time.Minute

// openAIURLRef is what a reference to a made image's URL holds: the URL,
// its expiry, and the request reference to make it again from.
type openAIURLRef struct {
	URL     string `json:"url"`
	Expires int64  `json:"expires"` // Unix seconds
	Request string `json:"request"` // the reference Submit answered
}

const openAIURLRefPrefix = "openai-url:v1:"

// Produce implements Producer: POST {base_url}/images/generations with
// {"model", "prompt", "n": 1, "size"} under the task id as
// Idempotency-Key. An answer with data[0].b64_json is the image; one with
// data[0].url is a reference to it (with its expiry) for Fetch.
func (g *openAI) Produce(ctx context.Context, ref string) (Produced, error) {
	r, err := g.parseRef(ref)
	if err != nil {
		return Produced{}, err
	}
	body, err := json.Marshal(struct {
		Model  string `json:"model"`
		Prompt string `json:"prompt"`
		N      int    `json:"n"`
		Size   string `json:"size"`
	}{g.model, r.Prompt, 1, r.Size})
	if err != nil {
		return Produced{}, Permanent(err)
	}
	req, err := http.NewRequest(http.MethodPost, g.endpoint, bytes.NewReader(body))
	if err != nil {
		return Produced{}, Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", r.Key)
	_, answer, err := g.c.do(ctx, "generate", req, true, openAIErrorMessage)
	if err != nil {
		return Produced{}, err
	}
	var out struct {
		Created int64 `json:"created"`
		Data    []struct {
			B64JSON string `json:"b64_json"`
			URL     string `json:"url"`
		} `json:"data"`
	}
	if err := json.Unmarshal(answer, &out); err != nil {
		return Produced{}, g.c.protocolError("generate", "the answer is not the Images API's JSON: %v", err)
	}
	if len(out.Data) == 0 {
		return Produced{}, g.c.protocolError("generate", "the answer has no data[0]")
	}
	switch d := out.Data[0]; {
	case d.B64JSON != "":
		// Some compatible servers answer a data: URL instead of bare base64.
		b64 := d.B64JSON
		if rest, ok := strings.CutPrefix(b64, "data:"); ok {
			if _, after, ok := strings.Cut(rest, ";base64,"); ok {
				b64 = after
			}
		}
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return Produced{}, g.c.protocolError("generate", "data[0].b64_json is not base64: %v", err)
		}
		img, err := imageOf(g.c, "generate", b)
		if err != nil {
			return Produced{}, err
		}
		return Produced{Image: &img}, nil
	case d.URL != "":
		u, err := url.Parse(d.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Produced{}, g.c.protocolError("generate", "data[0].url is not an http(s) URL")
		}
		created := time.Now()
		if out.Created > 0 && out.Created < created.Unix() {
			created = time.Unix(out.Created, 0)
		}
		b, err := json.Marshal(openAIURLRef{URL: d.URL, Expires: created.Add(openAIURLTTL).Unix(), Request: ref})
		if err != nil {
			return Produced{}, Permanent(err)
		}
		return Produced{Ref: openAIURLRefPrefix + base64.RawURLEncoding.EncodeToString(b)}, nil
	}
	return Produced{}, g.c.protocolError("generate", "data[0] has neither b64_json nor url")
}

// Fetch implements Generator: it downloads the image a reference from
// Produce names. A URL past its expiry, or one its host answers 404, 403
// or 410, is a *LostError that leads back to Produce; other failures leave
// the URL to a later try. Given a request reference (one recorded before
// Produce existed), it produces first.
func (g *openAI) Fetch(ctx context.Context, ref string) (Image, error) {
	raw, ok := strings.CutPrefix(ref, openAIURLRefPrefix)
	if !ok {
		p, err := g.Produce(ctx, ref)
		switch {
		case err != nil:
			return Image{}, err
		case p.Image != nil:
			return *p.Image, nil
		}
		raw = strings.TrimPrefix(p.Ref, openAIURLRefPrefix)
	}
	var r openAIURLRef
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil || r.URL == "" {
		return Image{}, Permanent(fmt.Errorf("generator %q: bad openai image reference", g.id))
	}
	if time.Now().Unix() >= r.Expires {
		return Image{}, &LostError{Ref: r.Request, Reason: ReasonExpired,
			Err: fmt.Errorf("generator %q: the image URL expired at %s before it was downloaded; the image is made again",
				g.id, time.Unix(r.Expires, 0).UTC().Format(time.RFC3339))}
	}
	req, err := http.NewRequest(http.MethodGet, r.URL, nil)
	if err != nil {
		return Image{}, Permanent(fmt.Errorf("generator %q: image URL: %w", g.id, err))
	}
	// The key is not sent: the URL may be another host's (a storage
	// bucket), and it is signed.
	_, body, err := g.c.do(ctx, "download", req, false, nil)
	var pe *ProviderError
	if errors.As(err, &pe) && (pe.Status == http.StatusNotFound || pe.Status == http.StatusForbidden || pe.Status == http.StatusGone) {
		return Image{}, &LostError{Ref: r.Request, Reason: ReasonGone,
			Err: fmt.Errorf("generator %q: download: the image host answered %d %s: the URL no longer serves the image; it is made again",
				g.id, pe.Status, http.StatusText(pe.Status))}
	}
	if err != nil {
		return Image{}, err
	}
	return imageOf(g.c, "download", body)
}

// Probe implements Prober: GET {base_url}/models, which every server of
// the API answers (with the key when one is set).
func (g *openAI) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(g.endpoint, "/images/generations")+"/models", nil)
	if err != nil {
		return Permanent(err)
	}
	_, _, err = g.c.do(ctx, "probe", req, true, openAIErrorMessage)
	return err
}

// openAIErrorMessage reads the Images API's error object,
// {"error": {"message", "type", "param", "code"}}: the message, and the
// code (or, without one, the type).
func openAIErrorMessage(body []byte) (string, string) {
	var e struct {
		Error struct {
			Message string         `json:"message"`
			Type    string         `json:"type"`
			Code    jsontext.Value `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		return plainMessage(body), ""
	}
	code := e.Error.Type
	var s string
	if json.Unmarshal(e.Error.Code, &s) == nil && s != "" {
		code = s
	}
	return e.Error.Message, code
}

// plainMessage is a body that is not the expected JSON, as text, when it
// is short text (a proxy's page is left out).
func plainMessage(body []byte) string {
	s := strings.TrimSpace(string(body))
	if s == "" || len(s) > 300 || strings.HasPrefix(s, "<") {
		return ""
	}
	return s
}

// requestSize is the size a job asks for: params.width x params.height
// when given (one alone makes a square), else def.
func requestSize(params jsontext.Value, def string) (string, error) {
	members, err := decodeObject(params)
	if err != nil {
		return "", err
	}
	w, h := 0, 0
	for name, p := range map[string]*int{"width": &w, "height": &h} {
		if v, ok := members[name]; ok {
			n, ok := intValue(v)
			if !ok || n < MinSize || n > MaxSize {
				return "", fmt.Errorf("params.%s must be an integer from %d to %d", name, MinSize, MaxSize)
			}
			*p = n
		}
	}
	switch {
	case w == 0 && h == 0:
		return def, nil
	case w == 0:
		w = h
	case h == 0:
		h = w
	}
	return strconv.Itoa(w) + "x" + strconv.Itoa(h), nil
}

// imageOf checks that bytes are a PNG, JPEG or WebP image and reads its
// size. Anything else is permanent: the provider would answer it again.
func imageOf(c *caller, call string, b []byte) (Image, error) {
	ct := intent.SniffImage(b)
	if ct == "" {
		pe := c.protocolError(call, "the image is not PNG, JPEG or WebP (%d bytes)", len(b))
		pe.Permanent = true
		return Image{}, pe
	}
	info, err := intent.InspectImage(ct, bytes.NewReader(b))
	if err != nil {
		pe := c.protocolError(call, "the image cannot be read: %v", err)
		pe.Permanent = true
		return Image{}, pe
	}
	return Image{Bytes: b, ContentType: info.ContentType, Width: info.Width, Height: info.Height}, nil
}

// trimRef shortens a reference for an error message.
func trimRef(ref string) string {
	if len(ref) > 40 {
		return ref[:40] + "..."
	}
	return ref
}
