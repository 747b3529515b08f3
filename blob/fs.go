package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FS stores bytes as files under a directory: DIR/ab/abcdef... (the first
// two hex digits name a subdirectory), written as a temporary file in
// DIR/tmp, fsynced, renamed into place, and the directory fsynced, so a
// file at its final path is always whole and survives a crash of the
// machine once Put returned.
type FS struct {
	dir string
	now func() time.Time
}

var (
	_ Store  = (*FS)(nil)
	_ Walker = (*FS)(nil)
)

// tmpDir holds files being written.
const tmpDir = "tmp"

// putPrefix starts the names of files being written, in tmpDir.
const putPrefix = "put-"

// NewFS opens (creating if needed) a store in dir.
func NewFS(dir string) (*FS, error) {
	if dir == "" {
		return nil, errors.New("open blob store: empty directory")
	}
	if err := os.MkdirAll(filepath.Join(dir, tmpDir), 0o700); err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	return &FS{dir: dir, now: time.Now}, nil
}

// Dir is the store's directory.
func (s *FS) Dir() string { return s.dir }

// Path is where the bytes of sha256 are kept.
func (s *FS) Path(sha256 string) string {
	return filepath.Join(s.dir, sha256[:2], sha256)
}

// Put stores r's bytes. When r can seek (a *bytes.Reader, a file), it is
// hashed first and bytes already stored are reused without writing them
// again; otherwise it is written to a temporary file while being hashed.
func (s *FS) Put(ctx context.Context, r io.Reader) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	if rs, ok := r.(io.ReadSeeker); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err != nil {
			return Info{}, fmt.Errorf("put blob: %w", err)
		}
		h := sha256.New()
		n, err := io.Copy(h, rs)
		if err != nil {
			return Info{}, fmt.Errorf("put blob: hash: %w", err)
		}
		info := Info{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}
		if s.reuse(info) {
			return info, nil
		}
		if _, err := rs.Seek(start, io.SeekStart); err != nil {
			return Info{}, fmt.Errorf("put blob: %w", err)
		}
	}
	return s.write(ctx, r)
}

// reuse keeps bytes already stored: under a shared lock on the file's
// directory (a sweep decides under an exclusive one) it checks the file is
// in place and whole, and refreshes its time so that no sweep removes it
// for a while. When a sweep removed it first, Put writes the bytes again.
func (s *FS) reuse(info Info) bool {
	p := s.Path(info.SHA256)
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		return false
	}
	defer d.Close()
	if lockFile(d, false) != nil {
		return false
	}
	defer unlockFile(d)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != info.Size {
		return false
	}
	now := s.now()
	return os.Chtimes(p, now, now) == nil
}

// createLocked creates a temporary file in tmpDir and locks it. The lock
// tells a sweep the file is being written; closing the file (or a crash)
// releases it. A sweep can take the file between its creation and its
// lock and remove it, so a file no longer linked under its name once
// locked is given up and another one made.
func (s *FS) createLocked() (*os.File, error) {
	for {
		tmp, err := os.CreateTemp(filepath.Join(s.dir, tmpDir), putPrefix+"*")
		if err != nil {
			return nil, err
		}
		if err := lockFile(tmp, true); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return nil, err
		}
		if linked(tmp, tmp.Name()) {
			return tmp, nil
		}
		tmp.Close()
	}
}

// write copies r to a temporary file while hashing it, fsyncs it and
// renames it into place.
func (s *FS) write(ctx context.Context, r io.Reader) (Info, error) {
	tmp, err := s.createLocked()
	if err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if err != nil {
		return Info{}, fmt.Errorf("put blob: write: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	// The file's time is the store's clock, as a reuse's touch is.
	now := s.now()
	if err := os.Chtimes(tmp.Name(), now, now); err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return Info{}, fmt.Errorf("put blob: fsync: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	info := Info{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}
	sub := filepath.Join(s.dir, info.SHA256[:2])
	if err := s.mkdir(sub); err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	d, err := os.Open(sub)
	if err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	defer d.Close()
	// Shared: Puts rename side by side; a sweep deciding a file of this
	// directory holds it exclusively.
	if err := lockFile(d, false); err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	defer unlockFile(d)
	// Renaming over an existing file of the same bytes is harmless: the
	// content at the path is whole before and after.
	if err := os.Rename(tmp.Name(), s.Path(info.SHA256)); err != nil {
		return Info{}, fmt.Errorf("put blob: %w", err)
	}
	done = true
	tmp.Close()
	if err := d.Sync(); err != nil {
		return Info{}, fmt.Errorf("put blob: fsync %s: %w", sub, err)
	}
	return info, nil
}

// mkdir creates a subdirectory and makes its entry durable.
func (s *FS) mkdir(sub string) error {
	if fi, err := os.Stat(sub); err == nil && fi.IsDir() {
		return nil
	}
	if err := os.Mkdir(sub, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(s.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return d.Close()
}

// Open opens the bytes of sha, verified: the file is hashed before it
// is handed out.
func (s *FS) Open(ctx context.Context, sha string) (io.ReadSeekCloser, error) {
	if err := CheckSHA256(sha); err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	f, err := os.Open(s.Path(sha))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open blob %s: %w", sha, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	// Verified before a byte is served: one more read of a file the page
	// cache holds (a SHA-256 runs at hundreds of MB/s).
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("open blob %s: %w", sha, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		f.Close()
		return nil, fmt.Errorf("open blob: %w: %s holds other content (%s)", ErrCorrupt, sha, got)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("open blob %s: %w", sha, err)
	}
	return f, nil
}

// Exists says whether the bytes of sha256 are stored.
func (s *FS) Exists(ctx context.Context, sha256 string) (bool, error) {
	if err := CheckSHA256(sha256); err != nil {
		return false, fmt.Errorf("blob exists: %w", err)
	}
	fi, err := os.Stat(s.Path(sha256))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("blob exists: %w", err)
	}
	return fi.Mode().IsRegular(), nil
}

// Sweep removes unnamed, old files. Each candidate is decided under an
// exclusive lock on its directory: old (by its time), named by no record,
// then removed. Put takes a shared lock on the directory to reuse a file
// (checking it is there and touching it) or to rename a new one into
// place: so a Put that returned has left a recent file that a sweep keeps
// for OlderThan, and the row its caller commits next never names missing
// bytes. Temporary files of writes that
// are still running are locked by their writer and kept whatever their
// age; those of interrupted writes are removed when old.
func (s *FS) Sweep(ctx context.Context, p SweepParams) (SweepResult, error) {
	var res SweepResult
	if p.InUse == nil {
		return res, errors.New("sweep blobs: no InUse")
	}
	if err := s.sweepTmp(ctx, p, &res); err != nil {
		return res, err
	}
	subs, err := os.ReadDir(s.dir)
	if err != nil {
		return res, fmt.Errorf("sweep blobs: %w", err)
	}
	for _, sub := range subs {
		if !sub.IsDir() || len(sub.Name()) != 2 {
			continue
		}
		if err := s.sweepDir(ctx, p, sub.Name(), &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// sweepDir sweeps one subdirectory, deciding each file under an exclusive
// lock on the directory.
func (s *FS) sweepDir(ctx context.Context, p SweepParams, name string, res *SweepResult) error {
	dir := filepath.Join(s.dir, name)
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sweep blobs: %w", err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("sweep blobs: %w", err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sweep blobs: %w", err)
		}
		sha := e.Name()
		if CheckSHA256(sha) != nil || sha[:2] != name || !e.Type().IsRegular() {
			continue
		}
		removed, err := s.sweepOne(ctx, p, d, sha)
		if err != nil {
			return fmt.Errorf("sweep blob %s: %w", sha, err)
		}
		if removed {
			res.Removed++
		} else {
			res.Kept++
		}
	}
	return nil
}

func (s *FS) old(fi fs.FileInfo, p SweepParams) bool {
	return s.now().Sub(fi.ModTime()) >= p.OlderThan
}

// sweepOne decides one file under an exclusive lock on its directory d.
func (s *FS) sweepOne(ctx context.Context, p SweepParams, d *os.File, sha string) (bool, error) {
	if err := lockFile(d, true); err != nil {
		return false, err
	}
	defer unlockFile(d)
	path := s.Path(sha)
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !s.old(fi, p) {
		return false, nil
	}
	if in, err := p.InUse(ctx, sha); err != nil || in {
		return false, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// sweepTmp removes old temporary files whose writer is gone (a running
// writer holds a lock on its file).
func (s *FS) sweepTmp(ctx context.Context, p SweepParams, res *SweepResult) error {
	dir := filepath.Join(s.dir, tmpDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("sweep blobs: %w", err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sweep blobs: %w", err)
		}
		if !strings.HasPrefix(e.Name(), putPrefix) {
			continue
		}
		removed, err := s.sweepLeftover(filepath.Join(dir, e.Name()), p)
		if err != nil {
			return fmt.Errorf("sweep blobs: %w", err)
		}
		if removed {
			res.Leftovers++
		}
	}
	return nil
}

func (s *FS) sweepLeftover(path string, p SweepParams) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	ok, err := tryLockFile(f)
	if err != nil || !ok {
		return false, err // a writer is still at it
	}
	defer unlockFile(f)
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !linked(f, path) || !s.old(fi, p) {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// linked says whether path still names the open file f (a temporary file
// is renamed into place when its write ends).
func linked(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	if err != nil {
		return false
	}
	return os.SameFile(a, b)
}

// Walk calls fn with every blob stored under the directory.
func (s *FS) Walk(ctx context.Context, fn func(sha256 string) error) error {
	subs, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("walk blobs: %w", err)
	}
	for _, sub := range subs {
		if !sub.IsDir() || len(sub.Name()) != 2 {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(s.dir, sub.Name()))
		if err != nil {
			return fmt.Errorf("walk blobs: %w", err)
		}
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("walk blobs: %w", err)
			}
			if sha := e.Name(); CheckSHA256(sha) == nil && sha[:2] == sub.Name() && e.Type().IsRegular() {
				if err := fn(sha); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
