package generator

import (
	"bytes"
	"context"
	"encoding/base64"
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
// call: the reference is all a worker in another process needs); Wait has
// nothing to wait for; Fetch makes the call, under the task id as
// Idempotency-Key, and reads data[0].b64_json, or downloads data[0].url.
// A Fetch done again (a retry, a resumed task) calls again with the same
// key.
type openAI struct {
	id       string
	endpoint string
	model    string
	size     string
	prompt   promptTemplate
	c        *caller
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
	return &openAI{id: s.ID, endpoint: u.String() + "/images/generations", model: s.Model, size: size, prompt: pt, c: c}, nil
}

// ID implements Generator.
func (g *openAI) ID() string { return g.id }

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
		return "", fmt.Errorf("submit: %w", err)
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

// Wait implements Generator: the image is made by Fetch's call.
func (g *openAI) Wait(ctx context.Context, ref string) error {
	if _, err := g.parseRef(ref); err != nil {
		return err
	}
	return ctx.Err()
}

// Fetch implements Generator: POST {base_url}/images/generations with
// {"model", "prompt", "n": 1, "size"}, then the image from data[0].
func (g *openAI) Fetch(ctx context.Context, ref string) (Image, error) {
	r, err := g.parseRef(ref)
	if err != nil {
		return Image{}, err
	}
	body, err := json.Marshal(struct {
		Model  string `json:"model"`
		Prompt string `json:"prompt"`
		N      int    `json:"n"`
		Size   string `json:"size"`
	}{g.model, r.Prompt, 1, r.Size})
	if err != nil {
		return Image{}, Permanent(err)
	}
	req, err := http.NewRequest(http.MethodPost, g.endpoint, bytes.NewReader(body))
	if err != nil {
		return Image{}, Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", r.Key)
	_, answer, err := g.c.do(ctx, "generate", req, true, openAIErrorMessage)
	if err != nil {
		return Image{}, err
	}
	var out struct {
		Data []struct {
			B64JSON string `json:"b64_json"`
			URL     string `json:"url"`
		} `json:"data"`
	}
	if err := json.Unmarshal(answer, &out); err != nil {
		return Image{}, g.c.protocolError("generate", "the answer is not the Images API's JSON: %v", err)
	}
	if len(out.Data) == 0 {
		return Image{}, g.c.protocolError("generate", "the answer has no data[0]")
	}
	var img []byte
	switch d := out.Data[0]; {
	case d.B64JSON != "":
		// Some compatible servers answer a data: URL instead of bare base64.
		b64 := d.B64JSON
		if rest, ok := strings.CutPrefix(b64, "data:"); ok {
			if _, after, ok := strings.Cut(rest, ";base64,"); ok {
				b64 = after
			}
		}
		if img, err = base64.StdEncoding.DecodeString(b64); err != nil {
			return Image{}, g.c.protocolError("generate", "data[0].b64_json is not base64: %v", err)
		}
	case d.URL != "":
		if img, err = g.download(ctx, d.URL); err != nil {
			return Image{}, err
		}
	default:
		return Image{}, g.c.protocolError("generate", "data[0] has neither b64_json nor url")
	}
	return imageOf(g.c, "generate", img)
}

// download reads an image the answer named by URL. The key is not sent:
// the URL may be another host's (a storage bucket), and it is signed.
func (g *openAI) download(ctx context.Context, raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, g.c.protocolError("download", "data[0].url is not an http(s) URL")
	}
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, g.c.protocolError("download", "data[0].url: %v", err)
	}
	_, body, err := g.c.do(ctx, "download", req, false, nil)
	return body, err
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
