package s3blob

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"go.uber.org/goleak"

	"studio/blob"
	"studio/blob/blobtest"
	"studio/blob/s3blob/s3rvertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

var testOptions = Options{AccessKey: s3rvertest.AccessKey, SecretKey: s3rvertest.SecretKey}

// newPrefix is a prefix of its own in the shared server's bucket.
func newPrefix(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	return "t-" + hex.EncodeToString(b)
}

// TestConformance holds the object store to the contract every blob store
// keeps, against a real S3-compatible server.
func TestConformance(t *testing.T) {
	srv := s3rvertest.Start(t)
	blobtest.Run(t, func(t *testing.T) blobtest.Backend {
		u := srv.URL(newPrefix(t))
		clock := &blobtest.Clock{}
		open := func() *Store {
			s, err := Open(u, testOptions)
			if err != nil {
				t.Fatal(err)
			}
			s.now = clock.Now
			return s
		}
		s := open()
		return blobtest.Backend{
			Store: s, Twin: open(), Clock: clock,
			Count: func(t *testing.T) int {
				n := 0
				for obj := range s.c.ListObjectsIter(context.Background(), s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: true}) {
					if obj.Err != nil {
						t.Fatal(obj.Err)
					}
					n++
				}
				return n
			},
			Tamper: func(t *testing.T, sha string, data []byte) {
				if _, err := s.c.PutObject(context.Background(), s.bucket, s.live(sha), bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}

func TestOpenURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, err string
		prefix   string
	}{
		{"s3://bucket/some/prefix/?endpoint=http://127.0.0.1:4569&region=eu-west-1", "", "some/prefix/"},
		{"s3://bucket", "", ""},
		{"s3://key:secret@bucket/p", "credentials never go in the URL", ""},
		{"s3:///p", "is not s3://BUCKET/PREFIX", ""},
		{"gs://bucket/p", "is not s3://BUCKET/PREFIX", ""},
		{"s3://bucket/p?endpoint=127.0.0.1:4569", "is not http(s)://HOST[:PORT]", ""},
		{"s3://bucket/p?endpoint=http://h/path", "is not http(s)://HOST[:PORT]", ""},
		{"s3://bucket/p?secret=x", `unknown parameter "secret"`, ""},
	} {
		s, err := Open(tc.url, Options{})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Open(%q) = %v, want %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil || s.prefix != tc.prefix || s.bucket != "bucket" {
			t.Errorf("Open(%q) = %+v, %v", tc.url, s, err)
		}
	}
}

// A store that is down answers ErrUnavailable, never not-found, and works
// again once it is back.
func TestDown(t *testing.T) {
	srv := s3rvertest.Start(t)
	s, err := Open(srv.URL("down"), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	info, err := s.Put(ctx, strings.NewReader("before the outage"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := s.Put(ctx, strings.NewReader("during")); !errors.Is(err, blob.ErrUnavailable) {
		t.Fatalf("Put while down = %v, want ErrUnavailable", err)
	}
	if _, err := s.Open(ctx, info.SHA256); !errors.Is(err, blob.ErrUnavailable) {
		t.Fatalf("Open while down = %v, want ErrUnavailable", err)
	}
	if _, err := s.Exists(ctx, info.SHA256); !errors.Is(err, blob.ErrUnavailable) {
		t.Fatalf("Exists while down = %v, want ErrUnavailable", err)
	}
	if _, err := s.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour, InUse: func(context.Context, string) (bool, error) { return false, nil }}); !errors.Is(err, blob.ErrUnavailable) {
		t.Fatalf("Sweep while down = %v, want ErrUnavailable", err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	srv.Restart(rctx)
	f, err := s.Open(ctx, info.SHA256)
	if err != nil {
		t.Fatalf("Open after the outage: %v", err)
	}
	f.Close()
}

// A presigned URL reads the bytes without credentials.
func TestPresign(t *testing.T) {
	srv := s3rvertest.Start(t)
	s, err := Open(srv.URL("presign"), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	info, err := s.Put(ctx, strings.NewReader("a presigned image"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Presign(ctx, info.SHA256, time.Minute, "image/png")
	if err != nil {
		t.Fatal(err)
	}
	res, err := httpGet(u.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.status != 200 || res.body != "a presigned image" || res.contentType != "image/png" {
		t.Fatalf("presigned GET: %+v", res)
	}
	missing := blobtest.SHA256([]byte("never stored"))
	if _, err := s.Presign(ctx, missing, time.Minute, ""); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Presign(missing) = %v, want ErrNotFound", err)
	}
}

// The race the trash is for, made to happen: a sweep decides an old
// object is unnamed; before it moves the object, a Put of the same bytes
// returns and a row naming them commits. The object leaves its place all
// the same, but its bytes stay readable from trash, and the sweep's trash
// pass puts them back.
func TestSweepMovesWhatAPutJustNamed(t *testing.T) {
	srv := s3rvertest.Start(t)
	u := srv.URL(newPrefix(t))
	clock := &blobtest.Clock{}
	open := func() *Store {
		s, err := Open(u, testOptions)
		if err != nil {
			t.Fatal(err)
		}
		s.now = clock.Now
		return s
	}
	putter, sweeper := open(), open()
	ctx := context.Background()
	data := []byte("an orphan a retry is about to name")
	info, err := putter.Put(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	inPlace := func() bool {
		_, err := putter.c.StatObject(ctx, putter.bucket, putter.live(info.SHA256), minio.StatObjectOptions{})
		if err != nil && !notFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	clock.Advance(2 * time.Hour)
	var named atomic.Bool
	moved := false
	sweeper.hook = func(event, sha string) {
		switch event {
		case "decided":
			if _, err := putter.Put(ctx, bytes.NewReader(data)); err != nil {
				t.Error(err)
			}
			named.Store(true) // the row commits
		case "moved":
			moved = true
			if inPlace() {
				t.Error("the object is still in place: the race did not happen")
			}
			if ok, err := putter.Exists(ctx, info.SHA256); err != nil || !ok {
				t.Errorf("Exists = %v, %v: a named blob is gone", ok, err)
			}
			f, err := putter.Open(ctx, info.SHA256)
			if err != nil {
				t.Errorf("a named blob cannot be read: %v", err)
				return
			}
			f.Close()
		}
	}
	inUse := func(context.Context, string) (bool, error) { return named.Load(), nil }
	res, err := sweeper.Sweep(ctx, blob.SweepParams{OlderThan: time.Hour, InUse: inUse})
	if err != nil || res.Removed != 1 || res.Purged != 0 || !moved {
		t.Fatalf("sweep = %+v, %v; moved %v", res, err, moved)
	}
	if !inPlace() {
		t.Fatal("the trash pass did not put the named blob back")
	}
	if _, err := putter.c.StatObject(ctx, putter.bucket, putter.trash(info.SHA256), minio.StatObjectOptions{}); !notFound(err) {
		t.Fatalf("trash copy left behind: %v", err)
	}
}
