package main

import (
	"fmt"
	"io"
	"net/http"
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
