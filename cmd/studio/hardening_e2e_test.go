package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
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
