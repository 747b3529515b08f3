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
package generator

import (
	"context"
	"errors"

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
// Permanent. Every other error, context errors included, is transient.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
