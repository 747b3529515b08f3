package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Client calls one studio server. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	retry Retry
	ua    string
}

// Retry says how a call retries.
type Retry struct {
	// Attempts is the most tries of one call, the first included: 6 by
	// default; 1 never retries.
	Attempts int
	// Base is the backoff before the second try; it doubles each try, up
	// to Max, and each wait is drawn at random between half of it and all
	// of it (jitter). 250ms and 8s by default.
	Base, Max time.Duration
	// AttemptTimeout bounds one try, answer body included (event streams:
	// until their headers); 30s by default.
	AttemptTimeout time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits for; a
	// longer one ends the call with the answer. 1 minute by default.
	MaxRetryAfter time.Duration
}

// DefaultRetry is the retry policy of a client made without WithRetry.
var DefaultRetry = Retry{Attempts: 6, Base: 250 * time.Millisecond, Max: 8 * time.Second,
	AttemptTimeout: 30 * time.Second, MaxRetryAfter: time.Minute}

// Option configures a Client.
type Option func(*Client)

// WithToken sends the bearer token on every /v1 call.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient makes the calls with hc instead of a client of its own.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRetry sets the retry policy; zero fields keep DefaultRetry's.
func WithRetry(r Retry) Option {
	return func(c *Client) {
		if r.Attempts > 0 {
			c.retry.Attempts = r.Attempts
		}
		if r.Base > 0 {
			c.retry.Base = r.Base
		}
		if r.Max > 0 {
			c.retry.Max = r.Max
		}
		if r.AttemptTimeout > 0 {
			c.retry.AttemptTimeout = r.AttemptTimeout
		}
		if r.MaxRetryAfter > 0 {
			c.retry.MaxRetryAfter = r.MaxRetryAfter
		}
	}
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.ua = ua } }

// New returns a client of the server at base (such as
// "http://127.0.0.1:7070").
func New(base string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil {
		return nil, fmt.Errorf("new client: server address: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("new client: server address %q: want http://host:port or https://host", base)
	}
	c := &Client{base: u, retry: DefaultRetry, ua: "studio-client"}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return c, nil
}

// FromEnv makes a client the way the studio command line does: for the
// server $STUDIO_SERVER (a bare HOST:PORT means http://; $STUDIO_URL is
// read when it is unset) with the token $STUDIO_TOKEN. A missing one is an
// error that names it. opts come after the token, so WithToken overrides
// it.
func FromEnv(opts ...Option) (*Client, error) {
	server := os.Getenv("STUDIO_SERVER")
	if server == "" {
		server = os.Getenv("STUDIO_URL")
	}
	if server == "" {
		return nil, errors.New("STUDIO_SERVER is not set: the server's address, such as http://127.0.0.1:7070")
	}
	token := os.Getenv("STUDIO_TOKEN")
	if token == "" {
		return nil, errors.New("STUDIO_TOKEN is not set: an API token of the server")
	}
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	return New(server, append([]Option{WithToken(token)}, opts...)...)
}

// NewRequestID makes a request id: a UUIDv7.
func NewRequestID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("make request id: %w", err)
	}
	return id.String(), nil
}

// call is one logical call: the same method, path, headers and body on
// every try.
type call struct {
	method string
	path   string // escaped, from the server's root
	query  url.Values
	header http.Header
	body   []byte
	// stream leaves the answer's body open for the caller (event streams):
	// the try's timeout ends with the headers.
	stream bool
	// timeout bounds each try instead of Retry.AttemptTimeout when set
	// (an acquire that waits in the server).
	timeout time.Duration
}

// answer is a successful answer: status, headers and the body read whole
// (or, for a stream, left open in resp).
type answer struct {
	status int
	header http.Header
	body   []byte
	resp   *http.Response
	cancel context.CancelFunc // of a stream's context
}

// do runs c with retries. A 2xx or 304 answer is returned; any other is
// an *Error, returned at once unless it is worth retrying (5xx, 429).
func (c *Client) do(ctx context.Context, cl call) (*answer, error) {
	var last error
	for try := 1; ; try++ {
		a, err, again := c.try(ctx, cl)
		if err == nil {
			return a, nil
		}
		var he *Error
		if errors.As(err, &he) {
			he.Tries = try
		}
		if !again || ctx.Err() != nil {
			if ctx.Err() != nil && last != nil && !errors.As(err, &he) {
				return nil, fmt.Errorf("%s %s: %w (last try: %v)", cl.method, cl.path, ctx.Err(), last)
			}
			return nil, err
		}
		last = err
		if try >= c.retry.Attempts {
			if he != nil {
				return nil, he
			}
			timeout := c.retry.AttemptTimeout
			if cl.timeout > 0 {
				timeout = cl.timeout
			}
			kind, reason := unreachable(err, timeout)
			return nil, &UnreachableError{Server: c.base.Redacted(), Reason: reason, Kind: kind, Tries: try, Err: err}
		}
		wait := c.backoff(try)
		if he != nil && he.RetryAfter > 0 {
			if he.RetryAfter > c.retry.MaxRetryAfter {
				return nil, he
			}
			wait = max(wait, he.RetryAfter)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%s %s: %w (last try: %v)", cl.method, cl.path, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// backoff is the wait after the try-th try: Base doubled per try, at most
// Max, drawn in [d/2, d].
func (c *Client) backoff(try int) time.Duration {
	d := c.retry.Base
	for i := 1; i < try && d < c.retry.Max; i++ {
		d *= 2
	}
	d = min(d, c.retry.Max)
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(d-half)+1))
}

// try makes one try. again says whether a failure is worth another try.
func (c *Client) try(ctx context.Context, cl call) (*answer, error, bool) {
	timeout := c.retry.AttemptTimeout
	if cl.timeout > 0 {
		timeout = cl.timeout
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	u := *c.base
	// cl.path is escaped already (seg): it is the raw path, and Path its
	// unescaped form, so that an id's "/" or "%" is sent as one segment,
	// escaped once.
	u.RawPath = c.base.EscapedPath() + cl.path
	if p, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = p
	} else {
		u.Path, u.RawPath = c.base.Path+cl.path, ""
	}
	if cl.query != nil {
		u.RawQuery = cl.query.Encode()
	}
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(tctx, cl.method, u.String(), body)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%s %s: %w", cl.method, cl.path, err), false
	}
	for k, vs := range cl.header {
		req.Header[k] = vs
	}
	if c.token != "" && strings.HasPrefix(cl.path, "/v1/") {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", c.ua)
	if cl.stream {
		// The try's timeout covers the wait for the headers only.
		cancel()
		sctx, scancel := context.WithCancel(ctx)
		req = req.WithContext(sctx)
		t := time.AfterFunc(c.retry.AttemptTimeout, scancel)
		resp, err := c.hc.Do(req)
		if !t.Stop() && err == nil {
			resp.Body.Close()
			err = context.DeadlineExceeded
		}
		if err != nil {
			scancel()
			return nil, fmt.Errorf("%s %s: %w", cl.method, cl.path, err), ctx.Err() == nil
		}
		if resp.StatusCode/100 == 2 {
			return &answer{status: resp.StatusCode, header: resp.Header, resp: resp, cancel: scancel}, nil, false
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		scancel()
		e := errorFrom(resp.StatusCode, resp.Header, b)
		return nil, e, retryable(resp.StatusCode)
	}
	defer cancel()
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", cl.method, cl.path, err), ctx.Err() == nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		// The answer was cut: try again (the request id makes it safe).
		return nil, fmt.Errorf("%s %s: read answer: %w", cl.method, cl.path, err), ctx.Err() == nil
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotModified {
		return &answer{status: resp.StatusCode, header: resp.Header, body: b}, nil, false
	}
	e := errorFrom(resp.StatusCode, resp.Header, b)
	return nil, e, retryable(resp.StatusCode)
}

// getJSON GETs path and decodes the answer into v.
func (c *Client) getJSON(ctx context.Context, path string, q url.Values, v any) error {
	a, err := c.do(ctx, call{method: http.MethodGet, path: path, query: q})
	if err != nil {
		return err
	}
	return decode(a, v)
}

func decode(a *answer, v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

// seg escapes one path segment.
func seg(s string) string { return url.PathEscape(s) }

// intent POSTs an intent's body under its request id (already in the
// body, or sent as Idempotency-Key when header is set) and decodes the
// record.
func (c *Client) intent(ctx context.Context, path string, body []byte, header http.Header, v any) (bool, error) {
	if header == nil {
		header = http.Header{}
	}
	header.Set("Content-Type", "application/json")
	a, err := c.do(ctx, call{method: http.MethodPost, path: path, header: header, body: body})
	if err != nil {
		return false, err
	}
	if err := decode(a, v); err != nil {
		return false, err // the caller names the request id
	}
	return a.status == http.StatusOK && a.header.Get("Idempotent-Replayed") == "true", nil
}

// CreateGeneration submits a generation. Without req.RequestID it makes
// one, once: every try sends the same id and body, so however many tries
// it takes, one batch is made. The answer names the id.
func (c *Client) CreateGeneration(ctx context.Context, req GenerationRequest) (*Created[Batch], error) {
	return createIntent[Batch](ctx, c, "create generation", "/v1/generations", &req.RequestID, &req)
}

// createIntent makes *requestID once when it is empty, encodes req (which
// holds that id) once, and POSTs the same bytes on every try.
func createIntent[T any](ctx context.Context, c *Client, what, path string, requestID *string, req any) (*Created[T], error) {
	if *requestID == "" {
		id, err := NewRequestID()
		if err != nil {
			return nil, err
		}
		*requestID = id
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%s: encode: %w", what, err)
	}
	out := &Created[T]{RequestID: *requestID}
	if out.Replayed, err = c.intent(ctx, path, body, nil, &out.Record); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, *requestID, err)
	}
	return out, nil
}

// CreateGenerationJSON submits a generation body as it is (a JSON object,
// such as a file a user wrote). The request id is the body's
// "request_id"; when the body has none, requestID is sent as the
// Idempotency-Key header (one is made when requestID is empty, once). When
// both are present they must be equal (the server answers 400 otherwise).
func (c *Client) CreateGenerationJSON(ctx context.Context, body []byte, requestID string) (*Created[Batch], error) {
	var probe struct {
		RequestID *string `json:"request_id"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return nil, fmt.Errorf("create generation: the body is not a JSON object: %w", err)
	}
	header := http.Header{}
	switch {
	case probe.RequestID != nil && (requestID == "" || requestID == *probe.RequestID):
		requestID = *probe.RequestID
	case probe.RequestID != nil:
		header.Set("Idempotency-Key", requestID) // the server refuses the pair: 400
	default:
		if requestID == "" {
			id, err := NewRequestID()
			if err != nil {
				return nil, err
			}
			requestID = id
		}
		header.Set("Idempotency-Key", requestID)
	}
	out := &Created[Batch]{RequestID: requestID}
	var err error
	if out.Replayed, err = c.intent(ctx, "/v1/generations", body, header, &out.Record); err != nil {
		return nil, fmt.Errorf("create generation %s: %w", requestID, err)
	}
	return out, nil
}

// GetBatch reads a batch.
func (c *Client) GetBatch(ctx context.Context, id string) (*Batch, error) {
	var b Batch
	if err := c.getJSON(ctx, "/v1/batches/"+seg(id), nil, &b); err != nil {
		return nil, fmt.Errorf("get batch %s: %w", id, err)
	}
	return &b, nil
}

// CancelBatch cancels a batch (idempotent) and answers it as it stands
// after.
func (c *Client) CancelBatch(ctx context.Context, id string) (*Batch, error) {
	a, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/batches/" + seg(id) + "/cancel"})
	if err != nil {
		return nil, fmt.Errorf("cancel batch %s: %w", id, err)
	}
	var b Batch
	if err := decode(a, &b); err != nil {
		return nil, fmt.Errorf("cancel batch %s: %w", id, err)
	}
	return &b, nil
}

// DeleteBatch deletes an ended batch with its tasks, assets and
// publications, and frees its request id. A batch still running is a 409
// (cancel it first); one that is gone, a 404 (so a retry of a deletion
// whose answer was lost reports 404).
func (c *Client) DeleteBatch(ctx context.Context, id string) error {
	if _, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/batches/" + seg(id)}); err != nil {
		return fmt.Errorf("delete batch %s: %w", id, err)
	}
	return nil
}

// listPage reads one page of a list.
func listPage[T any](ctx context.Context, c *Client, path string, o ListOptions, extra url.Values) (*Page[T], error) {
	q := url.Values{}
	for k, vs := range extra {
		q[k] = vs
	}
	if o.Limit > 0 {
		q.Set("limit", fmt.Sprint(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	var p struct {
		Items      []T     `json:"items"`
		NextCursor *string `json:"next_cursor"`
	}
	if err := c.getJSON(ctx, path, q, &p); err != nil {
		return nil, err
	}
	out := &Page[T]{Items: p.Items}
	if p.NextCursor != nil {
		out.NextCursor = *p.NextCursor
	}
	return out, nil
}

// ListBatches reads a page of the actor's batches, newest first.
func (c *Client) ListBatches(ctx context.Context, o ListOptions) (*Page[Batch], error) {
	p, err := listPage[Batch](ctx, c, "/v1/batches", o, nil)
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	return p, nil
}

// ListTasks reads a page of a batch's tasks in plan order.
func (c *Client) ListTasks(ctx context.Context, batchID string, o TaskListOptions) (*Page[Task], error) {
	var extra url.Values
	if o.State != "" {
		extra = url.Values{"state": {o.State}}
	}
	p, err := listPage[Task](ctx, c, "/v1/batches/"+seg(batchID)+"/tasks", o.ListOptions, extra)
	if err != nil {
		return nil, fmt.Errorf("list tasks of %s: %w", batchID, err)
	}
	return p, nil
}

// AllTasks reads every task of a batch (in state, when not empty), page
// after page.
func (c *Client) AllTasks(ctx context.Context, batchID, state string) ([]Task, error) {
	var out []Task
	o := TaskListOptions{ListOptions: ListOptions{Limit: 500}, State: state}
	for {
		p, err := c.ListTasks(ctx, batchID, o)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Items...)
		if p.NextCursor == "" {
			return out, nil
		}
		o.Cursor = p.NextCursor
	}
}

// GetAsset reads an asset's record.
func (c *Client) GetAsset(ctx context.Context, id string) (*Asset, error) {
	var a Asset
	if err := c.getJSON(ctx, "/v1/assets/"+seg(id), nil, &a); err != nil {
		return nil, fmt.Errorf("get asset %s: %w", id, err)
	}
	return &a, nil
}

// AssetContent reads an asset's bytes and their content type.
func (c *Client) AssetContent(ctx context.Context, id string) ([]byte, string, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/assets/" + seg(id) + "/content"})
	if err != nil {
		return nil, "", fmt.Errorf("get asset %s content: %w", id, err)
	}
	return a.body, a.header.Get("Content-Type"), nil
}

// Upload stores an image (image/png, image/jpeg or image/webp). key is
// the client key (Idempotency-Key): one is made when empty, once, so a
// retried upload stores one asset.
func (c *Client) Upload(ctx context.Context, contentType string, data []byte, key string) (*Created[Asset], error) {
	if key == "" {
		id, err := NewRequestID()
		if err != nil {
			return nil, err
		}
		key = id
	}
	a, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/uploads", body: data,
		header: http.Header{"Content-Type": {contentType}, "Idempotency-Key": {key}}})
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", key, err)
	}
	out := &Created[Asset]{RequestID: key, Replayed: a.status == http.StatusOK && a.header.Get("Idempotent-Replayed") == "true"}
	if err := decode(a, &out.Record); err != nil {
		return nil, fmt.Errorf("upload %s: %w", key, err)
	}
	return out, nil
}

// CreatePublication publishes assets of a batch. Without req.RequestID it
// makes one, once, as CreateGeneration does.
func (c *Client) CreatePublication(ctx context.Context, req PublicationRequest) (*Created[Publication], error) {
	return createIntent[Publication](ctx, c, "create publication", "/v1/publications", &req.RequestID, &req)
}

// GetPublication reads a publication.
func (c *Client) GetPublication(ctx context.Context, id string) (*Publication, error) {
	var p Publication
	if err := c.getJSON(ctx, "/v1/publications/"+seg(id), nil, &p); err != nil {
		return nil, fmt.Errorf("get publication %s: %w", id, err)
	}
	return &p, nil
}

// ListPublications reads a page of the actor's publications, newest first.
func (c *Client) ListPublications(ctx context.Context, o ListOptions) (*Page[Publication], error) {
	p, err := listPage[Publication](ctx, c, "/v1/publications", o, nil)
	if err != nil {
		return nil, fmt.Errorf("list publications: %w", err)
	}
	return p, nil
}

// Health calls GET /healthz: nil while the server's process lives.
func (c *Client) Health(ctx context.Context) error {
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/healthz"}); err != nil {
		return fmt.Errorf("health: %w", err)
	}
	return nil
}

// Ready calls GET /readyz: nil when the server's database answers with
// every migration applied. A 503 is retried like any 5xx.
func (c *Client) Ready(ctx context.Context) error {
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/readyz"}); err != nil {
		return fmt.Errorf("ready: %w", err)
	}
	return nil
}

// OpenAPI reads the server's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/openapi.json"})
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	return a.body, nil
}

// Metrics reads the server's Prometheus metrics (text format).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/metrics"})
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return a.body, nil
}
