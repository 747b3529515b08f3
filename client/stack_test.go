package client_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"studio/blob"
	"studio/generator"
	"studio/httpapi"
	"studio/intent"
	"studio/intent/intenttest"
	"studio/leasequeue"
	"studio/locks"
	"studio/lockservice"
	"studio/planner"
	"studio/store/sqlite"
	"studio/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stack is the real studio in this process: the SQLite store, the intent
// service with the embedded catalog, the HTTP API on a loopback listener
// and (optionally) a worker pool with the embedded generators.
type stack struct {
	URL   string
	Token string
	Store *sqlite.Store
	API   *httpapi.Server
	stop  func()
}

// startStack starts a stack in dir; withWorkers starts a pool of 2.
func startStack(dir string, withWorkers bool) (*stack, error) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "studio.db"), Synchronous: sqlite.SyncNormal})
	if err != nil {
		return nil, err
	}
	blobs, err := blob.NewFS(filepath.Join(dir, "assets"))
	if err != nil {
		st.Close()
		return nil, err
	}
	svc := &intent.Service{Store: st, Planner: planner.New(planner.EmbeddedCatalog()), Locker: &intenttest.KeyedMutex{},
		Publications: st, Channels: []string{intent.ChannelGallery}}
	eng := locks.New(locks.NewMemoryStore())
	lockSvc, err := lockservice.New(lockservice.Config{Engine: eng})
	if err != nil {
		st.Close()
		return nil, err
	}
	closeLocks := func() {
		lockSvc.Close()
		eng.Close()
	}
	api, err := httpapi.New(httpapi.Config{
		Locks:        lockSvc,
		Generations:  svc,
		Publications: svc,
		Uploads:      &intent.Uploads{Store: st, Blobs: blobWriter{blobs}, Locker: &intenttest.KeyedMutex{}},
		Store:        st,
		Blobs:        blobs,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Events:       httpapi.Events{Poll: 10 * time.Millisecond, Heartbeat: time.Second},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "# studio metrics\n")
		}),
	})
	if err != nil {
		closeLocks()
		st.Close()
		return nil, err
	}
	srv := httptest.NewServer(api.Handler())
	srv.Config.RegisterOnShutdown(api.EndStreams)
	token, err := httpapi.NewToken()
	if err == nil {
		err = st.CreateToken(ctx, "local", httpapi.HashToken(token))
	}
	if err != nil {
		srv.Close()
		closeLocks()
		st.Close()
		return nil, err
	}
	var pool *worker.Pool
	if withWorkers {
		reg, err := generator.NewRegistry(generator.Spec{ID: "sketch", Kind: generator.KindEmbedded}, generator.Spec{ID: "mosaic", Kind: generator.KindEmbedded})
		if err == nil {
			pool, err = worker.New(worker.Config{
				Options: leasequeue.Options{
					Concurrency: 2,
					RetryBase:   5 * time.Millisecond,
					PollMin:     2 * time.Millisecond,
					PollMax:     20 * time.Millisecond,
					Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
				},
				Store:      st,
				Generators: reg,
				Blobs:      blobs,
				SweepEvery: -1,
			})
		}
		if err == nil {
			err = pool.Start(ctx)
		}
		if err != nil {
			srv.Close()
			closeLocks()
			st.Close()
			return nil, err
		}
	}
	return &stack{URL: srv.URL, Token: token, Store: st, API: api, stop: func() {
		if pool != nil {
			pool.Stop(context.Background())
		}
		api.EndStreams()
		srv.Close()
		closeLocks()
		st.Close()
	}}, nil
}

// newStack starts a stack for a test, stopped when it ends.
func newStack(t testing.TB, withWorkers bool) *stack {
	t.Helper()
	s, err := startStack(t.TempDir(), withWorkers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// blobWriter is the intent.BlobWriter of a blob store.
type blobWriter struct{ b blob.Store }

func (w blobWriter) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	info, err := w.b.Put(ctx, r)
	return info.SHA256, info.Size, err
}
