package generator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"studio/internal/retryafter"
)

// Limits of the remote generators' answers and waits.
const (
	// maxAnswer bounds an answer's body: an image, or JSON holding one in
	// base64.
	maxAnswer = 128 << 20
	// maxMessage bounds the provider's message kept in a task's error.
	maxMessage = 1000
	// maxRetryAfter bounds how long a Retry-After may push a retry back.
	maxRetryAfter = time.Hour
)

// caller makes a remote generator's HTTP calls: one timeout per call, the
// key in the Authorization header (and nowhere else), every call observed,
// and every failure turned into a *ProviderError with its class.
type caller struct {
	gen     string
	client  *http.Client
	timeout time.Duration
	keyEnv  string
	key     string // the secret: only ever written into a request header
	opts    Options
	// genCall is the call that makes an image (counted in the context's
	// Calls): "generate" or "submit".
	genCall string
}

func newCaller(o Options, s Spec, defaultTimeout time.Duration) (*caller, error) {
	c := &caller{gen: s.ID, timeout: time.Duration(s.Timeout), keyEnv: s.APIKeyEnv, opts: o}
	if c.timeout == 0 {
		c.timeout = defaultTimeout
	}
	if c.timeout < 0 {
		return nil, fmt.Errorf("generator %q: timeout must be positive", s.ID)
	}
	if s.APIKeyEnv != "" {
		v, ok := o.lookupEnv(s.APIKeyEnv)
		if !ok || strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("generator %q: api_key_env names %s, which is not set in the environment", s.ID, s.APIKeyEnv)
		}
		c.key = strings.TrimSpace(v)
	}
	t := o.Transport
	if t == nil {
		t = http.DefaultTransport.(*http.Transport).Clone()
	}
	c.client = &http.Client{Transport: t}
	return c, nil
}

// checkBaseURL checks a base_url: absolute http or https, no query.
func checkBaseURL(gen, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("generator %q: base_url is required", gen)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("generator %q: base_url %q is not an http(s) URL without query", gen, raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("generator %q: base_url may not hold credentials; use api_key_env", gen)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// errorMessage reads the provider's message from an error answer's body.
type errorMessage func(body []byte) (msg, code string)

// do sends req with the timeout and (when auth is set) the key, reads the
// answer's body, and answers it when the status is 2xx. Otherwise it
// answers a *ProviderError (or the context's error when ctx ended).
func (c *caller) do(ctx context.Context, call string, req *http.Request, auth bool, readMsg errorMessage) (*http.Response, []byte, error) {
	callCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req = req.WithContext(callCtx)
	if auth && c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	start := time.Now()
	resp, body, err := c.send(req)
	d := time.Since(start)
	if call == c.genCall && (resp != nil || !refused(err)) {
		countCall(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			// Our caller gave up (lease lost, batch canceled, stopping):
			// not the provider's failure.
			return nil, nil, fmt.Errorf("%s: %w", callText(call), ctx.Err())
		}
		pe := &ProviderError{Generator: c.gen, Class: ClassNetwork, Err: err,
			Message: fmt.Sprintf("%s: no answer from %s: %s", callText(call), req.URL.Host, c.scrub(rootCause(err)))}
		if errors.Is(err, context.DeadlineExceeded) || callCtx.Err() != nil {
			pe.Class = ClassTimeout
			pe.Message = fmt.Sprintf("%s: no answer from %s within %s", callText(call), req.URL.Host, c.timeout)
		}
		c.opts.observe(c.gen, call, pe.Class, d)
		return nil, nil, pe
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		c.opts.observe(c.gen, call, "", d)
		return resp, body, nil
	}
	pe := c.statusError(call, resp, body, readMsg)
	c.opts.observe(c.gen, call, pe.Class, d)
	return nil, nil, pe
}

// refused reports whether a request failed before it was sent: the
// connection was refused or its address not found.
func refused(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// send does the round trip and reads the body (within the timeout).
func (c *caller) send(req *http.Request) (*http.Response, []byte, error) {
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, nil, err
	}
	if len(body) > maxAnswer {
		return nil, nil, fmt.Errorf("the answer is over %d MiB", maxAnswer>>20)
	}
	return resp, body, nil
}

// statusError maps an error status to its class and retry rule:
// 429 and 5xx are transient (429 and 503 with their Retry-After), as are
// 408, 409 and 425; 401 and 403 are permanent and name the key variable;
// every other status is permanent with the provider's message.
func (c *caller) statusError(call string, resp *http.Response, body []byte, readMsg errorMessage) *ProviderError {
	status := resp.StatusCode
	msg, code := "", ""
	if readMsg != nil {
		msg, code = readMsg(body)
	}
	msg = c.scrub(msg)
	pe := &ProviderError{Generator: c.gen, Status: status}
	said := func(what string) string {
		s := fmt.Sprintf("%s: %s answered %d %s", callText(call), resp.Request.URL.Host, status, http.StatusText(status))
		if what != "" {
			s += ": " + what
		}
		return s
	}
	switch {
	case status == http.StatusTooManyRequests && code == "insufficient_quota":
		// OpenAI's "out of credits": waiting does not cure it.
		pe.Class, pe.Permanent, pe.Message = ClassRateLimited, true, said(msg)
	case status == http.StatusTooManyRequests:
		pe.Class, pe.Message = ClassRateLimited, said(msg)
		pe.RetryAfter = retryAfter(resp.Header, time.Now())
	case status >= 500:
		pe.Class, pe.Message = ClassUnavailable, said(msg)
		if status == http.StatusServiceUnavailable {
			pe.RetryAfter = retryAfter(resp.Header, time.Now())
		}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// The provider's own message may quote the key (masked or not):
		// it is left out.
		pe.Class, pe.Permanent = ClassAuth, true
		if c.keyEnv == "" {
			pe.Message = said("the provider wants a key; set api_key_env in the catalog to the variable that holds it")
		} else {
			pe.Message = said("the provider refused the key in " + c.keyEnv)
		}
	case status == http.StatusRequestTimeout:
		pe.Class, pe.Message = ClassTimeout, said(msg)
	case status == http.StatusConflict || status == http.StatusTooEarly:
		pe.Class, pe.Message = ClassUnavailable, said(msg)
	default:
		pe.Class, pe.Permanent, pe.Message = ClassRejected, true, said(msg)
	}
	return pe
}

// protocolError is an answer that cannot be read: transient, since a
// broken proxy or a provider restarting may cause it.
func (c *caller) protocolError(call, format string, args ...any) *ProviderError {
	return &ProviderError{Generator: c.gen, Class: ClassProtocol,
		Message: callText(call) + ": " + c.scrub(fmt.Sprintf(format, args...))}
}

// callTexts name the calls in error texts by their HTTP request, so that
// a text reads "submit: ... POST /prompt: ..." and never names a step
// twice (the worker names the step, the generator the request).
var callTexts = map[string]string{
	"generate": "POST /images/generations",
	"download": "image download",
	"submit":   "POST /prompt",
	"history":  "GET /history",
	"queue":    "GET /queue",
	"view":     "GET /view",
	"forget":   "POST /history",
	"probe":    "probe",
}

// callText is a call's name in error texts.
func callText(call string) string {
	if t, ok := callTexts[call]; ok {
		return t
	}
	return call
}

// scrub removes the key from a text, bounds its length and keeps it
// valid UTF-8, so that it can go into a task's error.
func (c *caller) scrub(s string) string {
	if c.key != "" {
		s = strings.ReplaceAll(s, c.key, "[redacted]")
	}
	s = strings.ToValidUTF8(strings.TrimSpace(s), "?")
	if utf8.RuneCountInString(s) > maxMessage {
		s = string([]rune(s)[:maxMessage]) + "..."
	}
	return s
}

// rootCause is the innermost error's text: a url.Error repeats the URL,
// which the message already names.
func rootCause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// retryAfter reads Retry-After (delay-seconds or an HTTP-date, RFC 9110
// 10.2.3), or OpenAI's retry-after-ms, bounded by maxRetryAfter; 0 when
// absent or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if ms := h.Get("Retry-After-Ms"); ms != "" {
		if v, err := strconv.ParseFloat(ms, 64); err == nil && v > 0 {
			// Bounded before the conversion: a float past int64 converts to
			// whatever the machine gives (negative on amd64).
			d = time.Duration(min(v, float64(maxRetryAfter/time.Millisecond)) * float64(time.Millisecond))
		}
	}
	if d == 0 {
		d, _ = retryafter.Parse(h.Get("Retry-After"), now)
	}
	return max(0, min(d, maxRetryAfter))
}
