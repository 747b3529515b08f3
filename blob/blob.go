// Package blob keeps asset bytes, addressed by their SHA-256.
//
// Bytes are written before the row that names them ("files first, rows
// after"): a crash between the two leaves an unnamed file, which the next
// Put of the same bytes reuses or a Sweep removes once it is old enough; a
// row never names bytes that are not stored. The same bytes are stored
// once, whatever number of assets name them.
//
// FS is the filesystem implementation; a database-backed one can implement
// the same interface.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Store keeps bytes by their SHA-256 (64 lowercase hex digits).
type Store interface {
	// Put stores the bytes read from r and answers their SHA-256 and size.
	// When the bytes are stored already, it keeps them (and marks them as
	// just used, so a concurrent Sweep keeps them).
	Put(ctx context.Context, r io.Reader) (Info, error)
	// Open opens stored bytes; ErrNotFound if there are none.
	Open(ctx context.Context, sha256 string) (io.ReadSeekCloser, error)
	// Exists says whether the bytes are stored.
	Exists(ctx context.Context, sha256 string) (bool, error)
	// Sweep removes stored bytes that no asset names and that were not
	// written or reused within p.OlderThan, and leftovers of interrupted
	// writes.
	Sweep(ctx context.Context, p SweepParams) (SweepResult, error)
}

// Info describes stored bytes.
type Info struct {
	SHA256 string
	Size   int64
}

// SweepParams steers a sweep.
type SweepParams struct {
	// OlderThan protects recent files: a Put that is about to commit its
	// row wrote or touched its file less than this long ago. It must be
	// well above the time between a Put and its row's commit.
	OlderThan time.Duration
	// InUse says whether any record names the bytes.
	InUse func(ctx context.Context, sha256 string) (bool, error)
}

// SweepResult counts what a sweep did.
type SweepResult struct {
	// Removed counts unnamed files removed.
	Removed int
	// Kept counts files kept (named, or too recent).
	Kept int
	// Leftovers counts removed temporary files of interrupted writes.
	Leftovers int
}

// Errors, matched with errors.Is.
var (
	// ErrNotFound: no bytes are stored under the SHA-256.
	ErrNotFound = errors.New("blob not found")
	// ErrInvalid: the SHA-256 is not 64 lowercase hex digits.
	ErrInvalid = errors.New("invalid blob sha256")
)

// CheckSHA256 reports whether s is 64 lowercase hex digits.
func CheckSHA256(s string) error {
	if len(s) != 64 {
		return fmt.Errorf("%w: %q", ErrInvalid, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%w: %q", ErrInvalid, s)
		}
	}
	return nil
}
