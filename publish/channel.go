package publish

import (
	"context"
	"errors"
	"io"

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
