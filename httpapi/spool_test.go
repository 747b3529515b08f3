package httpapi

import (
	"bytes"
	"errors"
	"io"
	"os"
	"studio/intent"
	"testing"
)

// failingReader fails after n bytes.
type failingReader struct {
	n   int
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

func TestSpoolBody(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := bytes.Repeat([]byte("studio"), 100)
	s, err := spoolBody(bytes.NewReader(data), dir, int64(len(data)))
	if err != nil {
		t.Fatalf("a body of exactly the limit: %v", err)
	}
	back, err := io.ReadAll(s.Reader())
	if err != nil || !bytes.Equal(back, data) || s.Size != int64(len(data)) || len(s.SHA256) != 64 {
		t.Fatalf("spool read back %d bytes (%v), size %d sha %q", len(back), err, s.Size, s.SHA256)
	}
	// Two readers at once each read the whole.
	r1, r2 := s.Reader(), s.Reader()
	a, _ := io.ReadAll(r1)
	b, _ := io.ReadAll(r2)
	if !bytes.Equal(a, data) || !bytes.Equal(b, data) {
		t.Fatal("readers share a position")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}

	// One byte over: refused while reading, after limit+1 bytes, and the
	// file is gone.
	src := &countingReader{r: bytes.NewReader(make([]byte, 10<<20))}
	_, err = spoolBody(src, dir, 1000)
	if intent.ErrorCode(err) != intent.ETooLarge {
		t.Fatalf("over the limit: %v", err)
	}
	if src.n > 1001+32<<10 {
		t.Fatalf("read %d bytes of a body refused at 1000", src.n)
	}
	if _, err := spoolBody(&failingReader{n: 10, err: errors.New("connection reset")}, dir, 1000); intent.ErrorCode(err) != intent.EInvalid {
		t.Fatalf("a body that breaks off: %v", err)
	}
	tooLarge := intent.Errorf(intent.ETooLarge, "over")
	if _, err := spoolBody(&failingReader{n: 10, err: tooLarge}, dir, 1000); intent.ErrorCode(err) != intent.ETooLarge {
		t.Fatalf("a reader's own domain error: %v", err)
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("spool files left behind: %v %v", left, err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
