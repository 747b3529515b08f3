// Package blob keeps asset bytes, addressed by their SHA-256.
//
// Bytes are written before the row that names them ("files first, rows
// after"): a crash between the two leaves an unnamed file, which the next
// Put of the same bytes reuses or a Sweep removes once it is old enough; a
// row never names bytes that are not stored. The same bytes are stored
// once, whatever number of assets name them.
//
// Bytes are verified on read: Open answers ErrCorrupt, not an image, when
// the stored bytes do not hash to their name (a torn write, a disk fault,
// an object replaced behind the store's back).
//
// FS is the filesystem implementation; the PostgreSQL store keeps bytes in
// its database and s3blob in S3-compatible object storage, all three held
// to the same contract by blobtest.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	// Open opens stored bytes, verified: ErrNotFound if there are none,
	// ErrCorrupt if what is stored does not hash to sha256.
	Open(ctx context.Context, sha256 string) (io.ReadSeekCloser, error)
	// Exists says whether the bytes are stored.
	Exists(ctx context.Context, sha256 string) (bool, error)
	// Sweep removes stored bytes that no asset names and that were not
	// written or reused within p.OlderThan, and leftovers of interrupted
	// writes.
	Sweep(ctx context.Context, p SweepParams) (SweepResult, error)
}

// Walker is a store that can list what it holds (every store here is
// one): `studio assets copy` walks a store to copy it to another.
type Walker interface {
	// Walk calls fn with the SHA-256 of every blob stored, in no
	// particular order, and stops at fn's first error.
	Walk(ctx context.Context, fn func(sha256 string) error) error
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
	// Purged counts bytes deleted for good by a store that keeps what a
	// sweep removes for one more age first (s3blob's trash).
	Purged int
}

// Errors, matched with errors.Is.
var (
	// ErrNotFound: no bytes are stored under the SHA-256.
	ErrNotFound = errors.New("blob not found")
	// ErrInvalid: the SHA-256 is not 64 lowercase hex digits.
	ErrInvalid = errors.New("invalid blob sha256")
	// ErrCorrupt: the stored bytes do not hash to their SHA-256.
	ErrCorrupt = errors.New("stored blob is corrupt")
	// ErrUnavailable: the store cannot be reached or refused the request
	// (an object store that is down, throttling or misconfigured). It is a
	// fault of a dependency, worth a retry later, never a missing blob.
	ErrUnavailable = errors.New("blob store unavailable")
)

// ReadAll reads r to its end: into one slice of the right size when r
// tells how much is left (a bytes.Reader, a strings.Reader, a
// bytes.Buffer), not one that grows as io.ReadAll's does.
func ReadAll(r io.Reader) ([]byte, error) {
	l, ok := r.(interface{ Len() int })
	if !ok {
		return io.ReadAll(r)
	}
	buf := make([]byte, l.Len())
	n, err := io.ReadFull(r, buf)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return buf[:n], nil
	case err != nil:
		return nil, err
	}
	// Whatever came after what Len told.
	var probe [1]byte
	k, err := r.Read(probe[:])
	if k == 0 && errors.Is(err, io.EOF) {
		return buf, nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	rest, err := io.ReadAll(r)
	return append(append(buf, probe[:k]...), rest...), err
}

// Verify checks that data hashes to sha256, answering ErrCorrupt if not.
func Verify(sha256Hex string, data []byte) error {
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != sha256Hex {
		return fmt.Errorf("%w: %s holds %d bytes of other content", ErrCorrupt, sha256Hex, len(data))
	}
	return nil
}

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
