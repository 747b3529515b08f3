// Package generator is the Generator port and its embedded implementations.
//
// A worker moves a task through three idempotent steps: Submit hands the job
// to the generator under the task id as idempotency key and gets back a
// reference; Wait blocks until the job behind the reference is done; Fetch
// returns the finished image. The worker stores the step and the reference,
// so a worker that takes a task over resumes with the stored reference
// instead of starting again.
//
// The embedded generators (sketch, mosaic, noop) run in-process and keep no
// state: a reference carries everything Wait and Fetch need, so any process
// can resume any task. They render deterministic PNGs: the same job gives
// byte-identical images on every run and in every process.
//
// The remote generators are built from a catalog's Spec: kind openai (the
// OpenAI Images API and the servers that speak it) and kind comfyui (a
// ComfyUI server running a workflow in API format, with the task id as its
// prompt_id, looked up before any submission so that it is queued once).
// They fail with a *ProviderError, whose class feeds the metrics and whose
// Retry-After the worker's backoff honours. providertest holds fakes of
// both providers for tests.
package generator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// Job is one image to make: a task and its batch's spec.
type Job struct {
	// Key is the task id, the idempotency key of Submit.
	Key        string
	Prompt     string
	Collection string
	Frame      string
	// Candidate counts from 1.
	Candidate int
	// Seed is nil when the caller gave none.
	Seed *int64
	// Params is the batch's params object (canonical JSON); nil means {}.
	Params   jsontext.Value
	Subjects []string
	// Attempt is the 1-based number of this try of the task.
	Attempt int
}

// Image is a finished picture.
type Image struct {
	Bytes       []byte
	ContentType string
	Width       int
	Height      int
}

// Generator makes images in three idempotent steps. Errors are transient
// unless marked with Permanent.
type Generator interface {
	// ID is the generator's id in the catalog.
	ID() string
	// Submit starts the job and returns a reference to it. Submitting the
	// same Key again returns the same reference and starts nothing new.
	Submit(ctx context.Context, job Job) (ref string, err error)
	// Wait blocks until the job behind ref is done or ctx ends.
	Wait(ctx context.Context, ref string) error
	// Fetch returns the finished image of ref. It may be called again.
	Fetch(ctx context.Context, ref string) (Image, error)
}

// permanentError marks an error that no retry can cure.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the task fails at once instead of being
// retried. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent or is a permanent *ProviderError. Every other error, context
// errors included, is transient.
func IsPermanent(err error) bool {
	var p *permanentError
	if errors.As(err, &p) {
		return true
	}
	var pe *ProviderError
	return errors.As(err, &pe) && pe.Permanent
}

// Classes of provider call errors, for metrics and logs: a small fixed set.
const (
	ClassNetwork     = "network"      // no answer: connection refused or reset, DNS
	ClassTimeout     = "timeout"      // no answer within the generator's timeout
	ClassRateLimited = "rate_limited" // 429
	ClassUnavailable = "unavailable"  // 5xx
	ClassRejected    = "rejected"     // the provider refused the job: 400, 404, 422, an invalid workflow, a failed execution
	ClassAuth        = "auth"         // 401, 403
	ClassProtocol    = "protocol"     // an answer studio cannot read
)

// ErrorClasses lists every class, in a fixed order.
func ErrorClasses() []string {
	return []string{ClassNetwork, ClassTimeout, ClassRateLimited, ClassUnavailable, ClassRejected, ClassAuth, ClassProtocol}
}

// ProviderError is a failed call to a remote generator's provider. Its
// message is safe to store and show: it never holds a secret.
type ProviderError struct {
	// Generator is the catalog id of the generator.
	Generator string
	// Class is one of the Class* constants.
	Class string
	// Status is the HTTP status of the answer, 0 when there was none.
	Status int
	// Permanent says that no retry can cure it: the task fails at once.
	Permanent bool
	// RetryAfter is how long the provider asked to wait before the next
	// try (429 and 503 with Retry-After); 0 when it did not say.
	RetryAfter time.Duration
	// Message says what happened, with the provider's own message when it
	// gave one.
	Message string
	// Err is the underlying error, if any (a network error).
	Err error
}

func (e *ProviderError) Error() string {
	msg := fmt.Sprintf("generator %q: %s", e.Generator, e.Message)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return msg
}

func (e *ProviderError) Unwrap() error { return e.Err }

// RetryWait is the provider's Retry-After, for leasequeue.RetryWait: the
// task's next try comes no sooner.
func (e *ProviderError) RetryWait() time.Duration { return e.RetryAfter }

// RetryAfter reports how long the provider behind err asked to wait before
// the next try, when it said so (a 429 or 503 with Retry-After).
func RetryAfter(err error) (time.Duration, bool) {
	var pe *ProviderError
	if errors.As(err, &pe) && pe.RetryAfter > 0 {
		return pe.RetryAfter, true
	}
	return 0, false
}

// ErrorClass answers the class of a provider error in err, "" when err
// holds none.
func ErrorClass(err error) string {
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Class
	}
	return ""
}
