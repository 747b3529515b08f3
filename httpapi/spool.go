package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"studio/intent"
)

// spool is an upload body read to a temporary file while being hashed, so
// that the size limit is enforced while reading and the bytes can be read
// again (to check them, then to store them) without holding them in memory.
type spool struct {
	// SHA256 is the lowercase hex SHA-256 of the bytes.
	SHA256 string
	// Size is their length.
	Size int64
	f    *os.File
}

// spoolBody copies r into a new temporary file in dir (os.TempDir() when
// empty) while hashing it. More than limit bytes is ETooLarge, found as
// soon as the reading passes the limit. Read errors that are already an
// *intent.Error keep their code; others are EInvalid (the body could not be read).
// The caller closes the spool, which removes the file.
func spoolBody(r io.Reader, dir string, limit int64) (*spool, error) {
	f, err := os.CreateTemp(dir, "upload-*")
	if err != nil {
		return nil, fmt.Errorf("spool upload: %w", err)
	}
	s := &spool{f: f}
	h := sha256.New()
	src := &readErrs{r: io.LimitReader(r, limit+1)}
	n, err := io.Copy(io.MultiWriter(f, h), src)
	switch {
	case err != nil && src.err != nil:
		s.Close()
		var e *intent.Error
		if errors.As(src.err, &e) {
			return nil, src.err
		}
		return nil, intent.Errorf(intent.EInvalid, "The body could not be read.")
	case err != nil:
		s.Close()
		return nil, fmt.Errorf("spool upload: %w", err)
	case n > limit:
		s.Close()
		return nil, intent.Errorf(intent.ETooLarge, "The body is over its limit of %d bytes.", limit)
	}
	s.SHA256, s.Size = hex.EncodeToString(h.Sum(nil)), n
	return s, nil
}

// readErrs remembers the error of its reader, to tell a body that could
// not be read from a file that could not be written.
type readErrs struct {
	r   io.Reader
	err error
}

func (r *readErrs) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// Reader returns a new reader of the spooled bytes, from the start.
func (s *spool) Reader() io.ReadSeeker { return io.NewSectionReader(s.f, 0, s.Size) }

// Body is the spooled bytes as an upload takes them.
func (s *spool) Body() intent.UploadBody {
	return intent.UploadBody{SHA256: s.SHA256, Size: s.Size, Open: s.Reader}
}

// Close removes the temporary file.
func (s *spool) Close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	if rerr := os.Remove(s.f.Name()); err == nil {
		err = rerr
	}
	s.f = nil
	return err
}
