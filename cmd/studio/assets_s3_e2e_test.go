package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"studio/blob"
	"studio/blob/s3blob"
	"studio/blob/s3blob/s3rvertest"
	"studio/intent"
	"studio/store/postgres/pgtest"
	"studio/store/sqlite"
)

// The object store's process tests: studio processes with --assets
// s3://... against a real S3-compatible server (s3rver, started per test).

// bucket is a prefix of its own in an s3rver's bucket, seen from the test.
type bucket struct {
	t      *testing.T
	srv    *s3rvertest.Server
	prefix string
	mc     *minio.Client
}

func newBucket(t *testing.T) *bucket {
	t.Helper()
	srv := s3rvertest.Start(t)
	b := make([]byte, 4)
	rand.Read(b)
	mc, err := minio.New(srv.Addr, &minio.Options{Creds: credentials.NewStaticV4(s3rvertest.AccessKey, s3rvertest.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	return &bucket{t: t, srv: srv, prefix: "studio-" + hex.EncodeToString(b), mc: mc}
}

// url is the --assets URL, on endpoint when given (a proxy), else on the
// server.
func (b *bucket) url(endpoint string) string {
	if endpoint == "" {
		return b.srv.URL(b.prefix)
	}
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1", s3rvertest.Bucket, b.prefix, endpoint)
}

// keys lists the SHA-256 names of the objects under dir (sha256 or trash).
func (b *bucket) keys(dir string) []string {
	b.t.Helper()
	var out []string
	for obj := range b.mc.ListObjectsIter(context.Background(), s3rvertest.Bucket, minio.ListObjectsOptions{Prefix: b.prefix + "/" + dir + "/", Recursive: true}) {
		if obj.Err != nil {
			b.t.Fatal(obj.Err)
		}
		out = append(out, filepath.Base(obj.Key))
	}
	slices.Sort(out)
	return out
}

// store opens the object store as studio does.
func (b *bucket) store() *s3blob.Store {
	b.t.Helper()
	s, err := s3blob.Open(b.url(""), s3blob.Options{AccessKey: s3rvertest.AccessKey, SecretKey: s3rvertest.SecretKey})
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// tasksOf lists a batch's tasks.
func tasksOf(t *testing.T, c *client, batchID string) []taskAnswer {
	t.Helper()
	var page struct {
		Items []taskAnswer `json:"items"`
	}
	resp, err := c.do(context.Background(), "GET", "/v1/batches/"+batchID+"/tasks?limit=500", nil, &page)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET tasks: %v, %v", resp, err)
	}
	return page.Items
}

func assetOf(t *testing.T, c *client, id string) intent.Asset {
	t.Helper()
	var a intent.Asset
	resp, err := c.do(context.Background(), "GET", "/v1/assets/"+id, nil, &a)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET asset: %v, %v", resp, err)
	}
	return a
}

// get answers a GET of path with the token, without following redirects.
func get(t *testing.T, c *client, token, path string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// A batch drains with every image in the bucket and none in studio.db,
// DATA/assets or the blobs table; content is served through studio (with
// ETag and Range) or by a presigned redirect; a tampered object is refused.
func TestAssetsInObjectStore(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			bk := newBucket(t)
			data := t.TempDir()
			env := append(bk.srv.Env(), "STUDIO_DATA="+data)
			var pgURL string
			if engine == "postgres" {
				pgURL, _ = pgtest.Schema(t)
				env = append(env, "STUDIO_DATABASE_URL="+pgURL)
			}
			api := startProcess(t, env, "serve", "--addr", "127.0.0.1:0", "--workers", "2",
				"--assets", bk.url(""), "--assets-redirect", "1m")
			token := readToken(t, data)
			if engine == "postgres" {
				token = pgToken(t, pgURL, "alice")
			}
			c := newClient(t, api.Addr, token)
			f := &farm{t: t, data: data, api: api, c: c}
			b := f.generate(c, workGeneration("s3-drain", 2, 3, []string{"sketch"}, map[string]any{"width": 96, "height": 96}))
			b = f.waitBatch(c, b.ID, 2*time.Minute, "the batch to drain", batchEnded)
			if b.State != intent.StateSucceeded || b.TaskCount != 6 {
				t.Fatalf("batch %+v", b)
			}
			var shas []string
			var first intent.Asset
			for _, tk := range tasksOf(t, c, b.ID) {
				a := assetOf(t, c, *tk.AssetID)
				if first.ID == "" {
					first = a
				}
				shas = append(shas, a.SHA256)
			}
			slices.Sort(shas)
			shas = slices.Compact(shas)
			if got := bk.keys("sha256"); !slices.Equal(got, shas) {
				t.Fatalf("bucket holds %v, want the assets' %v", got, shas)
			}

			// Through studio: the verified bytes, ETag, Range, 304.
			resp, body := get(t, c, token, "/v1/assets/"+first.ID+"/content?redirect=false")
			if resp.StatusCode != 200 || blobSHA(body) != first.SHA256 || resp.Header.Get("ETag") != `"`+first.SHA256+`"` {
				t.Fatalf("streamed content: %d, ETag %q", resp.StatusCode, resp.Header.Get("ETag"))
			}
			img := body
			if resp, body := get(t, c, token, "/v1/assets/"+first.ID+"/content?redirect=false", "Range", "bytes=0-7"); resp.StatusCode != 206 || !bytes.Equal(body, img[:8]) {
				t.Fatalf("range: %d %q", resp.StatusCode, body)
			}
			// By redirect: a presigned URL that needs no token.
			resp, _ = get(t, c, token, "/v1/assets/"+first.ID+"/content")
			loc := resp.Header.Get("Location")
			if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc, bk.srv.Endpoint()) || resp.Header.Get("ETag") != `"`+first.SHA256+`"` {
				t.Fatalf("redirect: %d to %q", resp.StatusCode, loc)
			}
			direct, err := http.Get(loc)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(direct.Body)
			direct.Body.Close()
			if direct.StatusCode != 200 || !bytes.Equal(got, img) || direct.Header.Get("Content-Type") != "image/png" {
				t.Fatalf("presigned GET: %d, %d bytes, %q", direct.StatusCode, len(got), direct.Header.Get("Content-Type"))
			}
			if resp, _ := get(t, c, token, "/v1/assets/"+first.ID+"/content", "If-None-Match", `"`+first.SHA256+`"`); resp.StatusCode != http.StatusNotModified {
				t.Fatalf("If-None-Match: %d", resp.StatusCode)
			}
			// An upload goes to the bucket too.
			up := pngImage(t, 20, 10, 5)
			var ua assetAnswer
			if resp, err := c.upload(context.Background(), "image/png", bytes.NewReader(up), &ua); err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("upload: %v, %v", resp, err)
			}
			if !slices.Contains(bk.keys("sha256"), ua.SHA256) {
				t.Fatal("the upload is not in the bucket")
			}

			// None of the bytes anywhere else.
			if files, _ := filepath.Glob(filepath.Join(data, "assets", "??", "*")); len(files) != 0 {
				t.Fatalf("%d files under DATA/assets", len(files))
			}
			switch engine {
			case "sqlite":
				for _, name := range []string{"studio.db", "studio.db-wal"} {
					db, err := os.ReadFile(filepath.Join(data, name))
					if err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
					if bytes.Contains(db, img[len(img)/2:len(img)/2+64]) {
						t.Fatalf("%s holds image bytes", name)
					}
				}
			case "postgres":
				var n int
				if err := pgStore(t, pgURL).Pool().QueryRow(context.Background(), `SELECT count(*) FROM blobs`).Scan(&n); err != nil || n != 0 {
					t.Fatalf("blobs table holds %d rows (%v)", n, err)
				}
			}

			// A tampered object is refused, not served.
			other := bytes.Repeat([]byte{0x89}, len(img))
			if _, err := bk.mc.PutObject(context.Background(), s3rvertest.Bucket, bk.prefix+"/sha256/"+first.SHA256,
				bytes.NewReader(other), int64(len(other)), minio.PutObjectOptions{DisableContentSha256: true}); err != nil {
				t.Fatal(err)
			}
			resp, body = get(t, c, token, "/v1/assets/"+first.ID+"/content?redirect=false")
			if resp.StatusCode != http.StatusServiceUnavailable || bytes.Contains(body, other[:16]) || !strings.Contains(string(body), "SHA-256") {
				t.Fatalf("tampered object: %d %s", resp.StatusCode, body)
			}
			if m := scrape(t, api.Addr); !strings.Contains(m, `studio_asset_store_faults_total{kind="corrupt"} 1`) {
				t.Fatalf("the tampered object is not counted:\n%s", grepLines(m, "faults_total"))
			}
		})
	}
}

// scrape answers the text of a process's /metrics.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

func blobSHA(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// killProxy forwards to an S3 server and, once armed, kills a process the
// moment the server has stored an asset object, before the answer reaches
// it: the worker dies between its upload and its commit.
type killProxy struct {
	mu     sync.Mutex
	target *proc
	killed chan string // the key stored
}

func startKillProxy(t *testing.T, upstream string) (*killProxy, string) {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	kp := &killProxy{killed: make(chan string, 1)}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(res *http.Response) error {
		r := res.Request
		if r.Method != "PUT" || !strings.Contains(r.URL.Path, "/sha256/") || res.StatusCode != 200 {
			return nil
		}
		kp.mu.Lock()
		p := kp.target
		kp.target = nil
		kp.mu.Unlock()
		if p == nil {
			return nil
		}
		p.signal(syscall.SIGKILL)
		kp.killed <- r.URL.Path
		return fmt.Errorf("the worker is gone")
	}
	srv := &http.Server{Handler: rp}
	ln := listenLocal(t)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return kp, "http://" + ln.Addr().String()
}

// kill -9 of a worker between its upload and its commit leaves one
// unnamed object; a sweep removes it; the task, taken over, stores its
// image again and names it.
func TestWorkerKilledBetweenUploadAndCommit(t *testing.T) {
	t.Parallel()
	bk := newBucket(t)
	proxy, endpoint := startKillProxy(t, bk.srv.Endpoint())
	data := t.TempDir()
	env := append(bk.srv.Env(), "STUDIO_DATA="+data)
	api := startProcess(t, env, "serve", "--addr", "127.0.0.1:0", "--workers", "0", "--assets", bk.url(""))
	c := newClient(t, api.Addr, readToken(t, data))
	f := &farm{t: t, data: data, api: api, c: c}
	b := f.generate(c, workGeneration("s3-kill", 1, 1, []string{"sketch"}, nil))

	w := startProcess(t, env, "worker", "--assets", bk.url(endpoint), "--lease-ttl", "2s")
	proxy.mu.Lock()
	proxy.target = w
	proxy.mu.Unlock()
	select {
	case <-proxy.killed:
	case <-time.After(2 * time.Minute):
		t.Fatal("the worker never stored its image")
	}
	w.wait(time.Minute)
	objs := bk.keys("sha256")
	if len(objs) != 1 {
		t.Fatalf("bucket holds %d objects after the kill, want 1", len(objs))
	}
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(data, "studio.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if in, err := s.BlobInUse(context.Background(), objs[0]); err != nil || in {
		t.Fatalf("the object is named (%v, %v): the commit happened", in, err)
	}
	if tk := tasksOf(t, c, b.ID)[0]; tk.State == intent.StateSucceeded {
		t.Fatalf("task %+v succeeded", tk)
	}
	res, err := bk.store().Sweep(context.Background(), blob.SweepParams{OlderThan: 0, InUse: s.BlobInUse})
	if err != nil || res.Removed != 1 || res.Purged != 1 {
		t.Fatalf("sweep = %+v, %v; want the unnamed object removed", res, err)
	}
	if n := len(bk.keys("sha256")) + len(bk.keys("trash")); n != 0 {
		t.Fatalf("%d objects left after the sweep", n)
	}
	startProcess(t, env, "worker", "--assets", bk.url(""))
	b = f.waitBatch(c, b.ID, 2*time.Minute, "the task taken over", batchEnded)
	tk := tasksOf(t, c, b.ID)[0]
	if b.State != intent.StateSucceeded || tk.Attempts != 2 {
		t.Fatalf("batch %+v, task %+v", b, tk)
	}
	if got := bk.keys("sha256"); !slices.Equal(got, objs) {
		t.Fatalf("bucket holds %v, want the same image %v again", got, objs)
	}
	if in, err := s.BlobInUse(context.Background(), objs[0]); err != nil || !in {
		t.Fatalf("the object is not named after the retry: %v", err)
	}
}

// The object store down: reads and uploads answer 503 with Retry-After;
// tasks wait for it (no attempt burned, none failed) and finish once it is
// back.
func TestObjectStoreDown(t *testing.T) {
	t.Parallel()
	bk := newBucket(t)
	data := t.TempDir()
	env := append(bk.srv.Env(), "STUDIO_DATA="+data)
	api := startProcess(t, env, "serve", "--addr", "127.0.0.1:0", "--workers", "2", "--assets", bk.url(""))
	token := readToken(t, data)
	c := newClient(t, api.Addr, token)
	f := &farm{t: t, data: data, api: api, c: c}
	b := f.generate(c, workGeneration("before", 1, 1, []string{"sketch"}, nil))
	b = f.waitBatch(c, b.ID, time.Minute, "the first batch", batchEnded)
	assetID := *tasksOf(t, c, b.ID)[0].AssetID

	bk.srv.Stop()
	resp, body := get(t, c, token, "/v1/assets/"+assetID+"/content")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "The asset store is unavailable.") {
		t.Fatalf("content while down: %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	var ua assetAnswer
	if resp, err := c.upload(context.Background(), "image/png", bytes.NewReader(pngImage(t, 8, 8, 1)), &ua); err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("upload while down: %v, %v", resp, err)
	}
	// Counted as the asset store's faults, not the database's.
	if m := scrape(t, api.Addr); !strings.Contains(m, `studio_asset_store_faults_total{kind="unavailable"} 2`) ||
		strings.Contains(m, `studio_database_faults_total{kind="asset_store"}`) || strings.Contains(m, `studio_database_faults_total{kind="unreachable"} 1`) {
		t.Fatalf("the outage's faults are not counted as the asset store's:\n%s", grepLines(m, "faults_total"))
	}
	b = f.generate(c, workGeneration("during", 1, 2, []string{"sketch"}, nil))
	pollFor(t, time.Minute, "both tasks waiting for the store", func() bool {
		return strings.Count(api.logs.String(), "asset store unavailable: the task waits for it") >= 2
	})
	for _, tk := range tasksOf(t, c, b.ID) {
		if tk.State != intent.StateRunning || tk.Attempts != 1 {
			t.Fatalf("task while the store is down: %+v", tk)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bk.srv.Restart(ctx)
	b = f.waitBatch(c, b.ID, time.Minute, "the batch after the outage", batchEnded)
	if b.State != intent.StateSucceeded {
		t.Fatalf("batch after the outage: %+v", b)
	}
	for _, tk := range tasksOf(t, c, b.ID) {
		if tk.Attempts != 1 {
			t.Fatalf("task %+v burned attempts on the outage", tk)
		}
	}
	if resp, _ := get(t, c, token, "/v1/assets/"+assetID+"/content"); resp.StatusCode != 200 {
		t.Fatalf("content after the outage: %d", resp.StatusCode)
	}
	// One line when the outage began, one when it ended (written once the
	// answer has gone).
	pollFor(t, time.Minute, "the end of the outage logged", func() bool {
		return strings.Contains(api.logs.String(), "asset store outage ended")
	})
	if b, e := strings.Count(api.logs.String(), "asset store outage began"), strings.Count(api.logs.String(), "asset store outage ended"); b != 1 || e != 1 {
		t.Fatalf("outage logged %d times as begun, %d as ended; want once each", b, e)
	}
}

// `studio bench --ops assets_drain_1` runs worker processes on
// PostgreSQL with the bytes in the object store and in the blobs table,
// and reports both rates and the WAL each task wrote; it leaves none of
// the worker processes' data directories behind.
func TestBenchAssetsDrain(t *testing.T) {
	bk := newBucket(t)
	url, _ := pgtest.Schema(t)
	bin := studioBinary(t)
	benchWorkerBinary = func() (string, error) { return bin, nil }
	defer func() { benchWorkerBinary = os.Executable }()
	for _, kv := range bk.srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	data := t.TempDir()
	args := []string{"bench", "--data", data, "--database", url, "--assets", bk.url(""), "--json", "--n", "1", "--tasks", "100", "--ops", "assets"}
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	if left, _ := filepath.Glob(filepath.Join(data, "*")); len(left) != 0 {
		t.Fatalf("the bench left %v in its --data", left)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), stdout.String())
	}
	for _, line := range lines {
		var r struct {
			Op        string   `json:"op"`
			N         int      `json:"n"`
			PerS      float64  `json:"per_s"`
			FloorPerS *float64 `json:"floor_per_s"`
			WAL       *float64 `json:"wal_bytes_per_task"`
			FloorWAL  *float64 `json:"floor_wal_bytes_per_task"`
			CPU       *float64 `json:"worker_cpu_per_task_us"`
			FloorCPU  *float64 `json:"floor_worker_cpu_per_task_us"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		t.Log(line)
		if r.N != 100 || r.PerS <= 0 || r.FloorPerS == nil || *r.FloorPerS <= 0 || r.WAL == nil || r.FloorWAL == nil ||
			r.CPU == nil || *r.CPU <= 0 || r.FloorCPU == nil || *r.FloorCPU <= 0 {
			t.Fatalf("result %s", line)
		}
		// The blobs table writes each 256 KiB image to the WAL; the
		// object store only its row.
		if *r.FloorWAL < 256<<10 || *r.WAL >= *r.FloorWAL/10 {
			t.Fatalf("%s: WAL per task %.0f with the object store, %.0f with the blobs table", r.Op, *r.WAL, *r.FloorWAL)
		}
	}
	// 100 images per operation in the bucket (the blobs table side puts
	// none there).
	if n := len(bk.keys("sha256")); n != 200 {
		t.Fatalf("bucket holds %d images, want 200", n)
	}
}

// `studio assets copy` moves a studio's assets (files on SQLite, the blobs
// table on PostgreSQL) to the object store: every one, verified; again,
// nothing (idempotent); after objects went missing or bad, exactly those
// (resumable); and a studio started on the object store serves the same
// bytes.
func TestAssetsCopy(t *testing.T) {
	bk := newBucket(t)
	for _, kv := range bk.srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			data := t.TempDir()
			env := []string{"STUDIO_DATA=" + data}
			where := []string{"--data", data}
			var pgURL string
			if engine == "postgres" {
				pgURL, _ = pgtest.Schema(t)
				env = append(env, "STUDIO_DATABASE_URL="+pgURL)
				where = append(where, "--database", pgURL)
			}
			api := startProcess(t, env, "serve", "--addr", "127.0.0.1:0", "--workers", "2")
			token := readToken(t, data)
			if engine == "postgres" {
				token = pgToken(t, pgURL, "alice")
			}
			c := newClient(t, api.Addr, token)
			f := &farm{t: t, data: data, api: api, c: c}
			b := f.generate(c, workGeneration("to-copy", 1, 4, []string{"sketch"}, nil))
			b = f.waitBatch(c, b.ID, time.Minute, "the batch", batchEnded)
			var ids []string
			for _, tk := range tasksOf(t, c, b.ID) {
				ids = append(ids, *tk.AssetID)
			}
			var ua assetAnswer
			if resp, err := c.upload(context.Background(), "image/png", bytes.NewReader(pngImage(t, 20, 10, 7)), &ua); err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("upload: %v, %v", resp, err)
			}
			ids = append(ids, ua.ID)
			originals := map[string][]byte{}
			for _, id := range ids {
				resp, body := get(t, c, token, "/v1/assets/"+id+"/content")
				if resp.StatusCode != 200 {
					t.Fatalf("content %s: %d", id, resp.StatusCode)
				}
				originals[id] = body
			}

			prefix := bk.prefix + "-" + engine
			to := bk.srv.URL(prefix)
			copyOnce := func(want string) {
				t.Helper()
				var out, errb bytes.Buffer
				args := append([]string{"assets", "copy", "--to", to}, where...)
				if code := run(context.Background(), args, &out, &errb); code != 0 {
					t.Fatalf("assets copy: exit %d: %s%s", code, out.String(), errb.String())
				}
				if got := strings.TrimSpace(out.String()); got != want {
					t.Fatalf("assets copy said %q, want %q", got, want)
				}
			}
			keys := func() []string { return (&bucket{t: t, mc: bk.mc, prefix: prefix}).keys("sha256") }
			copyOnce("5 copied, 0 already there, 0 failed")
			if n := len(keys()); n != 5 {
				t.Fatalf("bucket holds %d objects, want 5", n)
			}
			copyOnce("0 copied, 5 already there, 0 failed")
			// Two objects lost and one tampered, as a copy stopped half way
			// or a bad disk would leave them: the next run redoes those.
			ks := keys()
			for _, k := range ks[:2] {
				if err := bk.mc.RemoveObject(context.Background(), s3rvertest.Bucket, prefix+"/sha256/"+k, minio.RemoveObjectOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := bk.mc.PutObject(context.Background(), s3rvertest.Bucket, prefix+"/sha256/"+ks[2],
				strings.NewReader("not the image"), 13, minio.PutObjectOptions{DisableContentSha256: true}); err != nil {
				t.Fatal(err)
			}
			copyOnce("3 copied, 2 already there, 0 failed")

			// A studio on the object store serves the same bytes.
			moved := startProcess(t, append(env, bk.srv.Env()...), "serve", "--addr", "127.0.0.1:0", "--workers", "0", "--assets", to)
			mc := newClient(t, moved.Addr, token)
			for id, want := range originals {
				resp, body := get(t, mc, token, "/v1/assets/"+id+"/content")
				if resp.StatusCode != 200 || !bytes.Equal(body, want) {
					t.Fatalf("after the move, content %s: %d, %d bytes (want %d)", id, resp.StatusCode, len(body), len(want))
				}
			}
		})
	}
}
