package generator

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Producer is a Generator whose wait step makes the image in one call (the
// OpenAI Images API): Produce answers what that call gave, for the worker
// to keep before anything else can fail. A worker calls Produce instead of
// Wait; Fetch then reads the new reference.
type Producer interface {
	Generator
	// Produce makes the image of ref (a reference Submit answered).
	Produce(ctx context.Context, ref string) (Produced, error)
}

// Produced is what a Producer's call answered: the image itself when the
// answer carried its bytes, else a new reference (an image URL, with its
// expiry) that Fetch downloads.
type Produced struct {
	// Image holds the bytes when they came inline (b64_json): the worker
	// stores them before anything else.
	Image *Image
	// Ref is the reference to record before Fetch, when Image is nil.
	Ref string
}

// Reasons a generation's result was lost or thrown away, for LostError and
// the metrics: a small fixed set.
const (
	// ReasonLost: the provider no longer holds the job or its output (a
	// ComfyUI restart, a cleared queue or history).
	ReasonLost = "lost"
	// ReasonGone: the image host answered that the URL is gone (404, 403).
	ReasonGone = "gone"
	// ReasonExpired: the image URL is past the expiry the provider gave.
	ReasonExpired = "expired"
	// ReasonSize: the image is not of the size asked, and the catalog
	// refuses such images.
	ReasonSize = "size"
	// ReasonUnreadable: the image is not a PNG, JPEG or WebP studio can
	// read.
	ReasonUnreadable = "unreadable"
	// ReasonAbandoned: the task ended (canceled, failed, its lease lost)
	// after the call and before its image was stored.
	ReasonAbandoned = "abandoned"
)

// DiscardReasons lists every reason, in a fixed order.
func DiscardReasons() []string {
	return []string{ReasonLost, ReasonGone, ReasonExpired, ReasonSize, ReasonUnreadable, ReasonAbandoned}
}

// LostError says that the provider no longer holds what a recorded
// reference names: the next try goes back to the step that makes it
// again, under the same idempotency key, instead of asking for it again.
type LostError struct {
	// Ref is where to resume: "" submits the job again; any other value is
	// a reference to produce again (the wait step of a Producer).
	Ref string
	// Reason is one of ReasonLost, ReasonGone, ReasonExpired.
	Reason string
	// Err says what was found.
	Err error
}

func (e *LostError) Error() string { return e.Err.Error() }
func (e *LostError) Unwrap() error { return e.Err }

// AsLost answers the *LostError in err, if any.
func AsLost(err error) (*LostError, bool) {
	var le *LostError
	ok := errors.As(err, &le)
	return le, ok
}

// Prober is a remote generator that can tell, without making an image,
// whether its provider answers: ComfyUI's GET /system_stats, the OpenAI
// kind's GET {base_url}/models.
type Prober interface {
	Probe(ctx context.Context) error
}

// Calls counts the paid generation calls a try of a task made (an OpenAI
// generate, a ComfyUI POST /prompt): every call sent that the provider
// may have carried out, answered or not, but not one refused before it
// was sent (a connection refused).
type Calls struct{ n atomic.Int64 }

// N answers the count so far.
func (c *Calls) N() int {
	if c == nil {
		return 0
	}
	return int(c.n.Load())
}

type callsKey struct{}

// WithCalls returns a context whose generation calls are counted in c,
// as net/http/httptrace carries a ClientTrace: the count belongs to one
// try of one task, which the generator's methods do not otherwise see.
func WithCalls(ctx context.Context, c *Calls) context.Context {
	return context.WithValue(ctx, callsKey{}, c)
}

func countCall(ctx context.Context) {
	if c, ok := ctx.Value(callsKey{}).(*Calls); ok && c != nil {
		c.n.Add(1)
	}
}

// Outage reports whether err says the provider is down or unreachable (no
// answer, a timeout, a 5xx), rather than that it refused this job: the
// errors a circuit breaker counts.
func Outage(err error) bool {
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Permanent {
		return false
	}
	switch pe.Class {
	case ClassNetwork, ClassTimeout:
		return true
	case ClassUnavailable:
		return pe.Status >= 500
	}
	return false
}

// probeTimeout bounds one probe call.
const probeTimeout = 10 * time.Second
