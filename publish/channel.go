package publish

import (
	"context"
	"errors"
	"io"
	"time"

	"studio/store"
)

// Channel carries out one item of a publication. Publish must be
// idempotent: running it again for the same item (after a crash, a lost
// lease or a failure) leaves the same result as running it once.
type Channel interface {
	Publish(ctx context.Context, item store.ClaimedItem) error
}

// BlobOpener opens stored asset bytes by their SHA-256. blob.Store is one.
type BlobOpener interface {
	Open(ctx context.Context, sha256 string) (io.ReadSeekCloser, error)
}

// permanentError marks a failure that no retry can mend.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure no retry can mend: the item fails at
// once instead of waiting for its next attempt.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent says whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// MaxRetryAfter bounds how long a receiver's Retry-After may push an
// item's next attempt back.
const MaxRetryAfter = time.Hour

// retryLaterError is a transient failure whose receiver said how long to
// wait (a 429 or 503 with Retry-After).
type retryLaterError struct {
	err   error
	after time.Duration
}

func (e retryLaterError) Error() string { return e.err.Error() }
func (e retryLaterError) Unwrap() error { return e.err }

// RetryWait is the receiver's wait, for leasequeue.RetryWait: the item's
// next try comes no sooner.
func (e retryLaterError) RetryWait() time.Duration { return min(e.after, MaxRetryAfter) }

// RetryLater marks err as transient with the wait the receiver asked
// for: the item's next attempt comes no sooner than after (bounded by
// MaxRetryAfter), however short its backoff would be.
func RetryLater(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return retryLaterError{err, after}
}

// RetryAfter answers the wait err asks for, when it was marked with
// RetryLater.
func RetryAfter(err error) (time.Duration, bool) {
	var r retryLaterError
	if errors.As(err, &r) && r.after > 0 {
		return r.RetryWait(), true
	}
	return 0, false
}
