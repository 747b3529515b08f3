package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"studio/internal/retryafter"
)

// ErrUnreachable is wrapped by the error of a call whose every try failed
// without an answer from the server (connection refused or reset, a
// timeout, a name that does not resolve): match it with errors.Is. The
// error is an *UnreachableError, which says why in people's words.
var ErrUnreachable = errors.New("server unreachable")

// UnreachableError is the error of a call whose every try failed without
// an answer. It matches ErrUnreachable (errors.Is) and wraps the last
// try's error (errors.As finds a *net.DNSError or *net.OpError there).
type UnreachableError struct {
	// Server is the server's address, as the client was made with it.
	Server string
	// Reason is why the last try got no answer, for people: "connection
	// refused", "no answer within 30s", "no such host studio.example".
	Reason string
	// Kind sorts Reason: "refused", "timeout", "dns" or "other".
	Kind string
	// Tries is how many tries the call made.
	Tries int
	// Err is the last try's error.
	Err error
}

// Error says it for people:
//
//	cannot reach the server at http://127.0.0.1:7070 (connection refused; 6 tries)
func (e *UnreachableError) Error() string {
	tries := "1 try"
	if e.Tries != 1 {
		tries = fmt.Sprintf("%d tries", e.Tries)
	}
	return fmt.Sprintf("cannot reach the server at %s (%s; %s)", e.Server, e.Reason, tries)
}

// Is makes errors.Is(err, ErrUnreachable) hold.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// Unwrap is the last try's error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// unreachable sorts the error of a try that got no answer (timeout: the
// try's limit) into a reason for people.
func unreachable(err error, timeout time.Duration) (kind, reason string) {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return "dns", "no such host " + dns.Name
		}
		if dns.IsTimeout {
			return "dns", "looking up " + dns.Name + " timed out"
		}
		return "dns", "cannot look up " + dns.Name
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout", fmt.Sprintf("no answer within %s", timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused", "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "other", "the connection was reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "other", "no route to the host"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "other", "the connection closed before the answer was whole"
	case errors.As(err, &op):
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "timeout", fmt.Sprintf("no answer within %s", timeout)
		}
		return "other", op.Err.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout", fmt.Sprintf("no answer within %s", timeout)
	}
	// A TLS or protocol failure: the innermost words are the clearest.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return "other", err.Error()
}

// Error is an error answer of the server: its status and the RFC 9457
// problem document it carried (or, for an answer that was not one, the
// status text and the start of the body as the detail).
type Error struct {
	// Status is the HTTP status.
	Status int
	// Type, Title and Detail are the problem document's.
	Type   string
	Title  string
	Detail string
	// Errors names the fields at fault, for input errors.
	Errors []FieldError
	// RetryAfter is what the answer's Retry-After header asked, if any.
	RetryAfter time.Duration
	// Tries is how many tries the call made before it gave up with this
	// answer (more than 1 only for answers worth retrying: 5xx, 429).
	Tries int
}

// FieldError names one field at fault and why.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error says the status and the problem by one rule: the headline (the
// status, and the detail as a sentence), then each field at fault that
// the detail does not state already, as "field: message", separated by
// "; " and ended with one period:
//
//	400 Bad Request: The request body is invalid. prompt: must not be empty; sets: must have 1 to 20 items.
//	422 Unprocessable Entity: providers[0]: no generator or route "oil" in the catalog.
func (e *Error) Error() string {
	s := e.Headline()
	if fields := e.FieldLines(); len(fields) > 0 {
		s += " " + strings.Join(fields, "; ") + "."
	}
	return s
}

// Headline is the status, its title, the tries when more than one, and
// the detail ended with one period:
//
//	503 Service Unavailable (after 6 tries): The database is busy.
func (e *Error) Headline() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, e.Title)
	if e.Tries > 1 {
		fmt.Fprintf(&b, " (after %d tries)", e.Tries)
	}
	if d := sentence(e.Detail); d != "" {
		b.WriteString(": " + d)
	}
	return b.String()
}

// FieldLines are the fields at fault as "field: message" (no final
// period), leaving out those the detail states already (a server that
// has one field at fault often says it in the detail too).
func (e *Error) FieldLines() []string {
	var out []string
	for _, f := range e.Errors {
		msg := strings.TrimRight(strings.TrimSpace(f.Message), ".")
		line := msg
		if f.Field != "" {
			line = f.Field + ": " + msg
		}
		if line == "" || strings.Contains(e.Detail, line) || (f.Field != "" && strings.Contains(e.Detail, f.Field+" "+msg)) {
			continue
		}
		out = append(out, line)
	}
	return out
}

// sentence is s, trimmed, ending with exactly one period (or the
// question or exclamation mark it ends with); "" stays "".
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "!") {
		return s
	}
	return strings.TrimRight(s, ".") + "."
}

// StatusOf returns the HTTP status of an *Error in err's chain, or 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// retryable says whether an answer with this status is worth another try.
func retryable(status int) bool {
	return status >= 500 || status == http.StatusTooManyRequests
}

// errorFrom reads an error answer's body into an *Error.
func errorFrom(status int, h http.Header, body []byte) *Error {
	e := &Error{Status: status, Title: http.StatusText(status)}
	if mt, _, _ := mime.ParseMediaType(h.Get("Content-Type")); mt == "application/problem+json" || mt == "application/json" {
		var p struct {
			Type   string       `json:"type"`
			Title  string       `json:"title"`
			Detail string       `json:"detail"`
			Errors []FieldError `json:"errors"`
		}
		if json.Unmarshal(body, &p) == nil {
			e.Type, e.Detail, e.Errors = p.Type, p.Detail, p.Errors
			if p.Title != "" {
				e.Title = p.Title
			}
		}
	}
	if e.Detail == "" && e.Type == "" {
		d := strings.TrimSpace(string(body))
		if len(d) > 200 {
			d = d[:200] + "..."
		}
		e.Detail = d
	}
	e.RetryAfter, _ = retryafter.Parse(h.Get("Retry-After"), time.Now())
	return e
}
