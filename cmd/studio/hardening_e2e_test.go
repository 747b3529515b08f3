package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scrapeSeries counts the series lines of a /metrics answer (every line
// that is not a comment) and returns its size in bytes.
func scrapeSeries(t *testing.T, url string) (series, size int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") && strings.HasPrefix(l, "studio_http_") {
			series++
		}
	}
	return series, len(b)
}

// TestMetricsMethodLabelsAreBounded sends made-up methods, one of them
// 20,000 characters long, without a token, to known and unknown paths:
// after a first round (which may add the "other" series), more made-up
// methods add no series at all, and no label carries what was sent.
func TestMetricsMethodLabelsAreBounded(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	m, _ := startMain(t, cfg)
	base := "http://" + m.Addr()
	send := func(method, path string) {
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	paths := []string{"/healthz", "/v1/batches", "/nowhere", "/metrics"}
	for _, p := range paths {
		send("FIRST", p)
	}
	scrapeSeries(t, base+"/metrics") // the scrape itself is a series
	before, _ := scrapeSeries(t, base+"/metrics")
	long := strings.Repeat("X", 20000)
	for i := range 50 {
		for _, p := range paths {
			send(fmt.Sprintf("MADEUP%d", i), p)
		}
	}
	send(long, "/healthz")
	after, size := scrapeSeries(t, base+"/metrics")
	if after != before {
		t.Fatalf("made-up methods grew /metrics from %d to %d studio_http_ series", before, after)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "MADEUP") || strings.Contains(string(b), "XXXX") || strings.Contains(string(b), "FIRST") {
		t.Fatalf("a made-up method is a label value (%d bytes of metrics)", size)
	}
	if !strings.Contains(string(b), `method="other"`) {
		t.Fatalf(`no method="other" series in /metrics`)
	}
}

// TestCursorsAcrossInstances: two servers on one database accept each
// other's cursors (the key is the database's); a hand-made cursor is 400.
func TestCursorsAcrossInstances(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	a, _ := startMain(t, cfg)
	cfg2 := cfg
	cfg2.Addr = "127.0.0.1:0"
	b, _ := startMain(t, cfg2)
	token := readToken(t, cfg.Data)
	ctx := context.Background()
	ca, cb := newClient(t, a.Addr(), token), newClient(t, b.Addr(), token)
	var ids []string
	for i := range 3 {
		var batch struct{ ID string }
		if resp, err := ca.do(ctx, "POST", "/v1/generations", generation(fmt.Sprintf("cur-%d", i), "f01"), &batch); err != nil || resp.StatusCode != 201 {
			t.Fatalf("create: %v %v", resp, err)
		}
		ids = append(ids, batch.ID)
	}
	var page struct {
		Items      []struct{ ID string }
		NextCursor *string `json:"next_cursor"`
	}
	if _, err := ca.do(ctx, "GET", "/v1/batches?limit=1", nil, &page); err != nil || page.NextCursor == nil {
		t.Fatalf("first page: %+v %v", page, err)
	}
	resp, err := cb.do(ctx, "GET", "/v1/batches?limit=1&cursor="+url.QueryEscape(*page.NextCursor), nil, &page)
	if err != nil || resp.StatusCode != 200 || len(page.Items) != 1 || page.Items[0].ID != ids[1] {
		t.Fatalf("the other instance answered %v %+v %v", resp.StatusCode, page, err)
	}
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"v":2,"scope":"batches","after":"` + ids[1] + `"}`))
	for _, c := range []*client{ca, cb} {
		if resp, err := c.do(ctx, "GET", "/v1/batches?cursor="+forged, nil, nil); err != nil || resp.StatusCode != 400 {
			t.Fatalf("a forged cursor: %v %v", resp.StatusCode, err)
		}
	}
}

// TestTokenFileNeverOverwritten: a data directory whose token file belongs
// to another database (here: serving a second SQLite file from the same
// folder, as serving PostgreSQL from it does) keeps its file byte for
// byte; the new token is printed with a word that it was not written, and
// works.
func TestTokenFileNeverOverwritten(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	first, _ := startMain(t, cfg)
	first.Close()
	before, err := os.ReadFile(filepath.Join(cfg.Data, "token"))
	if err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.Database = filepath.Join(t.TempDir(), "other.db")
	m, stdout := startMain(t, other)
	after, err := os.ReadFile(filepath.Join(cfg.Data, "token"))
	if err != nil || string(after) != string(before) {
		t.Fatalf("the token file changed (%v)", err)
	}
	out := stdout.String()
	if !strings.Contains(out, "not written") {
		t.Fatalf("stdout does not say the token was not written: %q", out)
	}
	var tok string
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "stu_") {
			tok = f
		}
	}
	if tok == "" || tok+"\n" == string(before) {
		t.Fatalf("no new token printed: %q", out)
	}
	resp, err := newClient(t, m.Addr(), tok).do(context.Background(), "GET", "/v1/batches", nil, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the printed token: %v %v", resp, err)
	}
}

// TestFlagsValidatedBeforeSideEffects: a bad flag fails serve before it
// creates anything: no token, no database, no data directory.
func TestFlagsValidatedBeforeSideEffects(t *testing.T) {
	t.Parallel()
	// A remote generator whose key variable is unset: the catalog does not
	// load, and that is found before the first token, not after.
	keyless := filepath.Join(t.TempDir(), "keyless.json")
	if err := os.WriteFile(keyless, []byte(`{"generators": [{"id": "remote", "kind": "openai",
		"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "STUDIO_TEST_UNSET_KEY_VARIABLE"}],
		"routes": {"auto": ["remote"]}, "subjects": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"catalog generator without its key", []string{"--catalog", keyless, "--workers", "1"}},
		{"webhook scheme", []string{"--webhook-url", "ftp://example.com/hook"}},
		{"webhook no host", []string{"--webhook-url", "http:///hook"}},
		{"webhook garbage", []string{"--webhook-url", "::not a url"}},
		{"addr", []string{"--addr", "no-port"}},
		{"debug addr", []string{"--debug-addr", "nope"}},
		{"synchronous", []string{"--sqlite-synchronous", "SOMETIMES"}},
		{"grace", []string{"--grace", "-1s"}},
		{"catalog", []string{"--catalog", "/no/such/catalog.json"}},
		{"body timeout", []string{"--body-timeout", "-5s"}},
		{"write stall", []string{"--write-stall", "-5s"}},
		{"max upload pixels", []string{"--max-upload-pixels", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := filepath.Join(t.TempDir(), "data")
			var o, e bytes.Buffer
			args := append([]string{"serve", "--data", data, "--addr", "127.0.0.1:0", "--workers", "0"}, tc.args...)
			// A serve that starts runs until ctx ends, then exits 0.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if code := run(ctx, args, &o, &e); code == 0 {
				t.Fatalf("serve %v exited 0", tc.args)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Fatalf("serve %v created %s (%v); stderr %s", tc.args, data, err, e.String())
			}
			if strings.Contains(o.String(), "stu_") {
				t.Fatalf("serve %v printed a token", tc.args)
			}
		})
	}
}

// TestDataIsOwnerOnly: a first start makes the data directory, studio.db
// with its WAL and shared-memory files, the assets, the upload spool and
// the token owner-only: 0700 directories, 0600 files (whatever the umask
// lets through, nothing for group and others).
func TestDataIsOwnerOnly(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Data = filepath.Join(t.TempDir(), "fresh", "data")
	cfg.Workers = 1
	m, _ := startMain(t, cfg)
	c := newClient(t, m.Addr(), readToken(t, cfg.Data))
	ctx := context.Background()
	var batch struct {
		ID    string
		State string
	}
	if resp, err := c.do(ctx, "POST", "/v1/generations", generation("modes", "f01"), &batch); err != nil || resp.StatusCode != 201 {
		t.Fatalf("create: %v %v", resp, err)
	}
	pollFor(t, 60*time.Second, "the batch to succeed", func() bool {
		c.do(ctx, "GET", "/v1/batches/"+batch.ID, nil, &batch)
		return batch.State == "succeeded"
	})
	seen := map[string]bool{}
	err := filepath.WalkDir(cfg.Data, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(cfg.Data, path)
		if rel == "gallery" {
			return filepath.SkipDir // published files: the gallery's own rules
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		seen[strings.SplitN(rel, string(filepath.Separator), 2)[0]] = true
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s is %v: group or others may use it", rel, perm)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".", "studio.db", "studio.db-wal", "studio.db-shm", "assets", "token", "uploads"} {
		if !seen[want] {
			t.Errorf("no %s in the data directory (saw %v)", want, seen)
		}
	}
}

// TestSIGTERMWithAStuckClient runs the binary, opens a connection whose
// upload body stops half way (its body deadline far off), and sends
// SIGTERM: once the grace period has passed, serve closes what is left,
// logs how many connections it cut, and exits 0.
func TestSIGTERMWithAStuckClient(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p := startProcess(t, []string{"STUDIO_DATA=" + data, "STUDIO_WORKERS=0"},
		"serve", "--addr", "127.0.0.1:0", "--grace", "1s", "--body-timeout", "10m")
	token := readToken(t, data)
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /v1/uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: image/png\r\nContent-Length: 100000\r\n\r\n\x89PNG\r\n\x1a\n", token); err != nil {
		t.Fatal(err)
	}
	// The request is stuck in its handler once its body is being spooled.
	pollFor(t, 30*time.Second, "the stuck upload to be spooled", func() bool {
		entries, _ := os.ReadDir(filepath.Join(data, "uploads"))
		return len(entries) > 0
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM with a stuck client, want 0", code)
	}
	lines := parseLogs(t, p.logs.String())
	cut := find(lines, "cut connections left after the grace period", nil)
	if len(cut) != 1 || cut[0]["connections"] != float64(1) {
		t.Fatalf("no log line naming 1 connection cut: %v", cut)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the stuck connection was not closed: %v", err)
	}
}

// TestUploadsSpoolInTheDataDirectory runs the binary with a system temp
// directory that does not exist: an upload still works (its body is
// spooled in DATA/uploads, never in /tmp), leaves nothing behind there,
// and a 1,000,000 x 1,000,000 PNG header is refused with 413.
func TestUploadsSpoolInTheDataDirectory(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	p := startProcess(t, []string{"STUDIO_DATA=" + data, "STUDIO_WORKERS=0", "TMPDIR=" + filepath.Join(data, "no-such-tmp")},
		"serve", "--addr", "127.0.0.1:0")
	c := newClient(t, p.Addr, readToken(t, data))
	ctx := context.Background()
	resp, err := c.upload(ctx, "image/png", bytes.NewReader(pngImage(t, 32, 32, 7)), nil)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload with no system temp directory: %v %v", resp, err)
	}
	entries, err := os.ReadDir(filepath.Join(data, "uploads"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("DATA/uploads after the upload: %v %v", entries, err)
	}
	huge := pngClaiming(1_000_000, 1_000_000)
	var prob problemAnswer
	resp, err = c.upload(ctx, "image/png", bytes.NewReader(huge), &prob)
	if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(prob.Detail, "pixels") {
		t.Fatalf("a 1,000,000 x 1,000,000 PNG: %v %+v %v", resp, prob, err)
	}
}

// pngClaiming is a PNG whose header claims w x h pixels (CRCs right), with
// a tiny image data chunk that does not match.
func pngClaiming(w, h uint32) []byte {
	chunk := func(typ string, data []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
		b = append(append(b, typ...), data...)
		return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, w), h)
	ihdr = append(ihdr, 8, 6, 0, 0, 0)
	out := append([]byte("\x89PNG\r\n\x1a\n"), chunk("IHDR", ihdr)...)
	out = append(out, chunk("IDAT", []byte{0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01})...)
	return append(out, chunk("IEND", nil)...)
}

// TestHeaderSizeLimit: headers over the server's limit (64 KiB) are
// refused with 431 before any handler runs.
func TestHeaderSizeLimit(t *testing.T) {
	t.Parallel()
	m, _ := startMain(t, testConfig(t))
	req, err := http.NewRequest("GET", "http://"+m.Addr()+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Padding", strings.Repeat("x", 200<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("200 KiB of headers: %d, want 431", resp.StatusCode)
	}
}
