package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"studio/internal/retryafter"
)

// ErrUnreachable is wrapped by the error of a call whose every try failed
// without an answer from the server (connection refused or reset, a
// timeout): match it with errors.Is.
var ErrUnreachable = errors.New("server unreachable")

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

// Error says the status, the detail and the fields at fault.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, e.Title)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for _, f := range e.Errors {
		fmt.Fprintf(&b, "; %s %s", f.Field, f.Message)
	}
	if e.Tries > 1 {
		fmt.Fprintf(&b, " (after %d tries)", e.Tries)
	}
	return b.String()
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
