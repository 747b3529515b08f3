// Package s3blob keeps asset bytes in S3-compatible object storage (Amazon
// S3, MinIO, Cloudflare R2, Google Cloud Storage's XML API, Ceph RGW), so
// that studio processes share no disk and the database keeps no image
// bytes. It speaks the protocol through minio-go.
//
// Objects are named by their SHA-256 under the URL's prefix:
//
//	PREFIX/sha256/<sha256>   the bytes an asset may name
//	PREFIX/trash/<sha256>    bytes a sweep took out, kept one more age
//
// Put uploads the bytes (one PUT, which also replaces a copy of the same
// bytes: they are stored once) with the store's time in the object's
// metadata; it returns once the store has them, before the caller commits
// the row that names them ("bytes first, rows after").
//
// Object storage has no locks, so a sweep cannot decide and delete as one
// step the way the files store does under a directory lock. It moves
// instead: an old, unnamed object is copied to trash/ and then deleted, and
// a later sweep deletes the trash copy only once it is itself older than
// the age and still unnamed, or restores it when a row names it by then.
// Open and Exists look in trash/ when the object is not in place. So a Put
// that races a sweep (its object deleted just after it was written or found)
// leaves its bytes in trash/, readable, until the next sweep puts them
// back: a row never names bytes that are gone. What this needs, beside the
// age being well above the time from a Put to its row's commit (as every
// store does), is that one object's copy and delete take much less than the
// age; a sweep that took longer leaves the object in place.
//
// Open reads the whole object and verifies it (size and SHA-256) before a
// byte is served; a mismatch is blob.ErrCorrupt. Every failure of the
// object store other than a missing object (refused connections, timeouts,
// 5xx, throttling, denied access) is blob.ErrUnavailable: a fault to wait
// out, never a missing image.
package s3blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"studio/blob"
)

// Store is a blob.Store in an S3 bucket.
type Store struct {
	c      *minio.Client
	bucket string
	// prefix ends with "/" unless empty.
	prefix string
	now    func() time.Time
	// hook, when set (tests), runs when a sweep has decided to move an
	// object to trash ("decided") and when it has moved it ("moved").
	hook func(event, sha string)
}

var _ blob.Store = (*Store)(nil)

// Options are what the URL does not say.
type Options struct {
	// AccessKey and SecretKey, when set, are the credentials (tests).
	// Otherwise they come from the standard AWS environment variables
	// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), then
	// the shared credentials file (~/.aws/credentials or
	// AWS_SHARED_CREDENTIALS_FILE, profile AWS_PROFILE), then the
	// instance's or container's role: never from the URL.
	AccessKey, SecretKey string
	// Transport carries the requests; a transport with short connect and
	// header timeouts when nil.
	Transport http.RoundTripper
}

// MaxObject is the largest object Open reads: above any asset studio
// makes or accepts (uploads are at most 20 MiB).
const MaxObject = 256 << 20

// IsURL says whether s names an object store (an s3:// URL).
func IsURL(s string) bool { return strings.HasPrefix(s, "s3://") }

// Open returns the store the URL names:
//
//	s3://BUCKET/PREFIX?endpoint=http://127.0.0.1:4569&region=us-east-1
//
// endpoint is the server's base URL (http or https; Amazon S3 when
// absent), region its region (us-east-1 when absent). It sends no request:
// a store that is down when studio starts is waited out like one that
// goes down later.
func Open(rawURL string, opts Options) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open object store: %w", err)
	}
	if u.Scheme != "s3" || u.Host == "" {
		return nil, fmt.Errorf("open object store: %q is not s3://BUCKET/PREFIX", rawURL)
	}
	if u.User != nil {
		return nil, errors.New("open object store: credentials never go in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or use a credentials file")
	}
	q := u.Query()
	for k := range q {
		if k != "endpoint" && k != "region" {
			return nil, fmt.Errorf("open object store: unknown parameter %q (endpoint and region are known)", k)
		}
	}
	endpoint, secure := "s3.amazonaws.com", true
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" || strings.Trim(eu.Path, "/") != "" {
			return nil, fmt.Errorf("open object store: endpoint %q is not http(s)://HOST[:PORT]", e)
		}
		endpoint, secure = eu.Host, eu.Scheme == "https"
	}
	region := q.Get("region")
	if region == "" {
		region = "us-east-1"
	}
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
	if opts.AccessKey != "" {
		creds = credentials.NewStaticV4(opts.AccessKey, opts.SecretKey, "")
	}
	tr := opts.Transport
	if tr == nil {
		tr = newTransport()
	}
	c, err := minio.New(endpoint, &minio.Options{
		Creds: creds, Secure: secure, Region: region, Transport: tr,
		// Callers retry (workers with backoff, clients after a 503):
		// one more try here is enough to ride over a dropped connection.
		MaxRetries: 2,
	})
	if err != nil {
		return nil, fmt.Errorf("open object store: %w", err)
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &Store{c: c, bucket: u.Host, prefix: prefix, now: time.Now}, nil
}

func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.ResponseHeaderTimeout = 30 * time.Second
	t.MaxIdleConnsPerHost = 32
	return t
}

func (s *Store) live(sha string) string  { return s.prefix + "sha256/" + sha }
func (s *Store) trash(sha string) string { return s.prefix + "trash/" + sha }

// Metadata keys (x-amz-meta-...): the store's time, in Unix nanoseconds,
// of the last write and of the move to trash.
const (
	metaTouched     = "Studio-Touched"
	metaQuarantined = "Studio-Quarantined"
)

func stamp(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

// stampOf reads a metadata time, or fallback when there is none.
func stampOf(info minio.ObjectInfo, key string, fallback time.Time) time.Time {
	if v := info.Metadata.Get("X-Amz-Meta-" + key); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(0, n)
		}
	}
	return fallback
}

// fault turns an error of the object store into the blob package's:
// blob.ErrNotFound for a missing object, blob.ErrUnavailable for
// everything else.
func fault(op, key string, err error) error {
	if notFound(err) {
		return fmt.Errorf("%s %s: %w", op, key, blob.ErrNotFound)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	return fmt.Errorf("%s %s: %w: %v", op, key, blob.ErrUnavailable, err)
}

func notFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == minio.NoSuchKey || r.Code == "NotFound"
}

// Put uploads r's bytes to their content address. A reader that can seek
// and read at an offset (a file, a bytes.Reader) is hashed in place, then
// sent from it: the bytes are not copied. Any other reader is read into
// memory first (assets are bounded).
func (s *Store) Put(ctx context.Context, r io.Reader) (blob.Info, error) {
	body, info, err := hashBody(r)
	if err != nil {
		return blob.Info{}, fmt.Errorf("put blob: %w", err)
	}
	key := s.live(info.SHA256)
	// One PUT whose signature covers the payload's SHA-256
	// (x-amz-content-sha256), which S3 checks against the bytes it
	// received: bytes that did not arrive whole are refused. (Not a
	// Content-MD5 as well: a second hash of every image for what the
	// signed hash already asks. Not minio-go's chunked streaming
	// signature, which some S3-compatible servers store as part of the
	// object.) Whatever a server stores is verified again on every read.
	if _, err := (minio.Core{Client: s.c}).PutObject(ctx, s.bucket, key, body, info.Size,
		"", info.SHA256, minio.PutObjectOptions{
			UserMetadata:         map[string]string{metaTouched: stamp(s.now())},
			ContentType:          "application/octet-stream",
			DisableContentSha256: true,
		}); err != nil {
		return blob.Info{}, fault("put blob", key, err)
	}
	return info, nil
}

// hashBody answers the bytes of r as a body to send (and to send again:
// it seeks to its start on a retry), with their SHA-256 and size.
func hashBody(r io.Reader) (io.ReadSeeker, blob.Info, error) {
	type readSeekerAt interface {
		io.ReadSeeker
		io.ReaderAt
	}
	if rs, ok := r.(readSeekerAt); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, blob.Info{}, err
		}
		end, err := rs.Seek(0, io.SeekEnd)
		if err != nil {
			return nil, blob.Info{}, err
		}
		body := io.NewSectionReader(rs, start, end-start)
		h := sha256.New()
		n, err := io.Copy(h, body)
		if err != nil {
			return nil, blob.Info{}, fmt.Errorf("hash: %w", err)
		}
		if n != end-start {
			return nil, blob.Info{}, fmt.Errorf("hash: read %d bytes of %d", n, end-start)
		}
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return nil, blob.Info{}, err
		}
		return body, blob.Info{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
	}
	data, err := blob.ReadAll(r)
	if err != nil {
		return nil, blob.Info{}, fmt.Errorf("read: %w", err)
	}
	sum := sha256.Sum256(data)
	return bytes.NewReader(data), blob.Info{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}, nil
}

// Open reads the bytes of sha, whole, and verifies them; the bytes of a
// sweep's trash when they are not in place.
func (s *Store) Open(ctx context.Context, sha string) (io.ReadSeekCloser, error) {
	if err := blob.CheckSHA256(sha); err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	data, err := s.get(ctx, s.live(sha))
	if errors.Is(err, blob.ErrNotFound) {
		data, err = s.get(ctx, s.trash(sha))
	}
	if err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	if err := blob.Verify(sha, data); err != nil {
		return nil, fmt.Errorf("open blob: %w", err)
	}
	return bytesReader{bytes.NewReader(data)}, nil
}

// get reads one object whole, checking it has the size the store says.
func (s *Store) get(ctx context.Context, key string) ([]byte, error) {
	obj, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fault("get", key, err)
	}
	defer obj.Close()
	st, err := obj.Stat()
	if err != nil {
		return nil, fault("get", key, err)
	}
	if st.Size > MaxObject {
		return nil, fmt.Errorf("get %s: %w: %d bytes, more than any asset", key, blob.ErrCorrupt, st.Size)
	}
	data := make([]byte, 0, st.Size)
	buf := bytes.NewBuffer(data)
	if _, err := buf.ReadFrom(obj); err != nil {
		return nil, fault("get", key, err)
	}
	if int64(buf.Len()) != st.Size {
		return nil, fmt.Errorf("get %s: %w: %d bytes read of %d", key, blob.ErrCorrupt, buf.Len(), st.Size)
	}
	return buf.Bytes(), nil
}

// bytesReader is a bytes.Reader with a Close that does nothing.
type bytesReader struct{ *bytes.Reader }

// Close implements io.Closer.
func (bytesReader) Close() error { return nil }

// Exists says whether the bytes of sha are stored, in place or in trash.
func (s *Store) Exists(ctx context.Context, sha string) (bool, error) {
	if err := blob.CheckSHA256(sha); err != nil {
		return false, fmt.Errorf("blob exists: %w", err)
	}
	for _, key := range []string{s.live(sha), s.trash(sha)} {
		_, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
		switch {
		case err == nil:
			return true, nil
		case !notFound(err):
			return false, fmt.Errorf("blob exists: %w", fault("stat", key, err))
		}
	}
	return false, nil
}

// Presign answers a URL that reads the bytes of sha from the object store
// without credentials until ttl has passed, with contentType as the
// answer's Content-Type; blob.ErrNotFound when the object is not in place
// (Open still finds bytes a sweep moved to trash). The bytes behind it are
// not verified by studio: the reader checks them against the ETag.
func (s *Store) Presign(ctx context.Context, sha string, ttl time.Duration, contentType string) (*url.URL, error) {
	if err := blob.CheckSHA256(sha); err != nil {
		return nil, fmt.Errorf("presign blob: %w", err)
	}
	key := s.live(sha)
	if _, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err != nil {
		return nil, fmt.Errorf("presign blob: %w", fault("stat", key, err))
	}
	q := url.Values{}
	if contentType != "" {
		q.Set("response-content-type", contentType)
	}
	u, err := s.c.PresignedGetObject(ctx, s.bucket, key, ttl, q)
	if err != nil {
		return nil, fmt.Errorf("presign blob: %w", fault("presign", key, err))
	}
	return u, nil
}

// Sweep moves old objects no asset names to trash, and deletes trash
// copies older than the age that are still unnamed (restoring the named
// ones): see the package comment.
func (s *Store) Sweep(ctx context.Context, p blob.SweepParams) (blob.SweepResult, error) {
	var res blob.SweepResult
	if p.InUse == nil {
		return res, errors.New("sweep blobs: no InUse")
	}
	for obj := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + "sha256/", Recursive: true}) {
		if obj.Err != nil {
			return res, fmt.Errorf("sweep blobs: %w", fault("list", s.prefix+"sha256/", obj.Err))
		}
		sha := path.Base(obj.Key)
		if blob.CheckSHA256(sha) != nil || obj.Key != s.live(sha) {
			continue
		}
		moved, err := s.sweepLive(ctx, p, sha, obj)
		if err != nil {
			return res, fmt.Errorf("sweep blob %s: %w", sha, err)
		}
		if moved {
			res.Removed++
		} else {
			res.Kept++
		}
	}
	for obj := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + "trash/", Recursive: true}) {
		if obj.Err != nil {
			return res, fmt.Errorf("sweep blobs: %w", fault("list", s.prefix+"trash/", obj.Err))
		}
		sha := path.Base(obj.Key)
		if blob.CheckSHA256(sha) != nil || obj.Key != s.trash(sha) {
			continue
		}
		purged, err := s.sweepTrash(ctx, p, sha)
		if err != nil {
			return res, fmt.Errorf("sweep blob %s: %w", sha, err)
		}
		if purged {
			res.Purged++
		}
	}
	return res, nil
}

func (s *Store) old(t time.Time, p blob.SweepParams) bool { return s.now().Sub(t) >= p.OlderThan }

// sweepLive decides one object in place: old by its listing and by its
// metadata, named by no asset, then copied to trash and deleted.
func (s *Store) sweepLive(ctx context.Context, p blob.SweepParams, sha string, listed minio.ObjectInfo) (bool, error) {
	// The object's time is at least its last write's: a recent one is
	// kept without asking more.
	if !s.old(listed.LastModified, p) {
		return false, nil
	}
	key := s.live(sha)
	info, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if notFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fault("stat", key, err)
	}
	if !s.old(stampOf(info, metaTouched, info.LastModified), p) {
		return false, nil
	}
	if in, err := p.InUse(ctx, sha); err != nil || in {
		return false, err
	}
	if s.hook != nil {
		s.hook("decided", sha)
	}
	start := s.now()
	if _, err := s.c.CopyObject(ctx, minio.CopyDestOptions{
		Bucket: s.bucket, Object: s.trash(sha),
		UserMetadata: map[string]string{metaQuarantined: stamp(start)}, ReplaceMetadata: true,
	}, minio.CopySrcOptions{Bucket: s.bucket, Object: key}); err != nil {
		if notFound(err) {
			return false, nil
		}
		return false, fault("copy to trash", key, err)
	}
	// The trash copy is safe for an age from start; the delete must land
	// well within it (see the package comment), or not at all: within a
	// quarter of the age (10 s at least, for sweeps of tiny ages that
	// promise nothing to racing Puts anyway).
	budget := max(p.OlderThan/4, 10*time.Second)
	if s.now().Sub(start) > budget {
		return false, nil
	}
	dctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	if err := s.c.RemoveObject(dctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return false, fault("delete", key, err)
	}
	if s.hook != nil {
		s.hook("moved", sha)
	}
	return true, nil
}

// sweepTrash decides one trash copy: named again, it goes back in place;
// unnamed and older than the age, it is deleted for good.
func (s *Store) sweepTrash(ctx context.Context, p blob.SweepParams, sha string) (bool, error) {
	key := s.trash(sha)
	in, err := p.InUse(ctx, sha)
	if err != nil {
		return false, err
	}
	if in {
		if _, err := s.c.CopyObject(ctx, minio.CopyDestOptions{
			Bucket: s.bucket, Object: s.live(sha),
			UserMetadata: map[string]string{metaTouched: stamp(s.now())}, ReplaceMetadata: true,
		}, minio.CopySrcOptions{Bucket: s.bucket, Object: key}); err != nil {
			if notFound(err) {
				return false, nil
			}
			return false, fault("restore", key, err)
		}
	} else {
		info, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
		if notFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fault("stat", key, err)
		}
		if !s.old(stampOf(info, metaQuarantined, info.LastModified), p) {
			return false, nil
		}
	}
	if err := s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return false, fault("delete", key, err)
	}
	return !in, nil
}

// Walk calls fn with every blob in place (not those in trash).
func (s *Store) Walk(ctx context.Context, fn func(sha256 string) error) error {
	for obj := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + "sha256/", Recursive: true}) {
		if obj.Err != nil {
			return fmt.Errorf("walk blobs: %w", fault("list", s.prefix+"sha256/", obj.Err))
		}
		if sha := path.Base(obj.Key); blob.CheckSHA256(sha) == nil && obj.Key == s.live(sha) {
			if err := fn(sha); err != nil {
				return err
			}
		}
	}
	return nil
}
