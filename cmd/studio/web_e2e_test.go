package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	apiclient "studio/client"
	"studio/internal/testskip"
	"studio/web"
)

// The web studio, end to end: the whole program in this process, a proxy
// in front of it that can drop answers, and headless Chromium driven with
// chromedp. Without a Chromium these tests skip and say so; with
// STUDIO_TEST_CHROMIUM set (CI sets it) a missing browser fails them.

// chromiumPath finds the browser: STUDIO_TEST_CHROMIUM, else chromium,
// chromium-browser, google-chrome on PATH.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STUDIO_TEST_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("STUDIO_TEST_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testskip.Chromium.Announce()
	t.Skip("no Chromium found (looked for chromium, chromium-browser, google-chrome on PATH; or set STUDIO_TEST_CHROMIUM=/path/to/chromium): the web studio's browser tests are skipped")
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile and returns a
// tab's context, with a deadline for the whole test.
func newBrowser(t *testing.T, width, height int) page {
	t.Helper()
	exe := chromiumPath(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	errs := &pageErrors{}
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf), chromedp.WithListener(errs.add))
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	t.Cleanup(func() {
		if !errs.wasChecked() {
			t.Error("the test never checked the page for uncaught exceptions: defer p.noPageErrors() after newBrowser")
		}
	})
	return page{t: t, ctx: bctx, errs: errs}
}

// pageErrors records what the page let escape: exceptions nothing caught,
// promise rejections nothing handled, and console.error and
// console.assert calls. The browser's own log (a 4xx answer to a fetch,
// which the tests cause on purpose) is not among them.
type pageErrors struct {
	mu      sync.Mutex
	seen    []string
	checked bool
}

// add is a chromedp listener: it runs on the tab's reading goroutine, in
// the order of the browser's messages.
func (e *pageErrors) add(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = d.Text
		if d.Exception != nil {
			msg += " " + remoteText(d.Exception)
		}
		msg += fmt.Sprintf(" (%s:%d:%d)", d.URL, d.LineNumber+1, d.ColumnNumber+1)
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		msg = "console." + string(ev.Type) + ":"
		for _, a := range ev.Args {
			msg += " " + remoteText(a)
		}
	default:
		return
	}
	e.mu.Lock()
	e.seen = append(e.seen, msg)
	e.mu.Unlock()
}

// remoteText is a value of the page in a line: a string as it is, an
// error's first line (its stack is in the location), another object's
// description.
func remoteText(o *runtime.RemoteObject) string {
	var str string
	switch {
	case json.Unmarshal(o.Value, &str) == nil:
		return str
	case o.Description != "":
		first, _, _ := strings.Cut(o.Description, "\n")
		return first
	}
	return string(o.Value)
}

func (e *pageErrors) wasChecked() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.checked
}

// noPageErrors fails the test when the page threw an exception nothing
// caught, left a rejection unhandled, or called console.error. Call it
// with defer right after newBrowser: it runs when the test's body ends,
// before the server it talks to stops.
func (p page) noPageErrors() {
	p.t.Helper()
	// A round trip: the listener has seen every message the browser sent
	// before the answer.
	_, _ = chromedp.Run(p.ctx, chromedp.Evaluate[bool](`true`))
	p.errs.mu.Lock()
	defer p.errs.mu.Unlock()
	p.errs.checked = true
	if len(p.errs.seen) > 0 {
		p.t.Errorf("the page let %d error(s) escape:\n  %s", len(p.errs.seen), strings.Join(p.errs.seen, "\n  "))
	}
}

// dropProxy forwards everything to studio. For a POST path set with
// lose, it forwards the request, lets studio answer it in full, and then
// loses the answer: "reset" closes the browser's connection without a byte
// of it, "502" answers 502 Bad Gateway with an HTML page, as a proxy
// would. The request was handled either way; its answer is lost.
type dropProxy struct {
	target *url.URL
	rp     *httputil.ReverseProxy
	srv    *httptest.Server

	mu      sync.Mutex
	losing  map[string]string   // POST path -> "reset" | "502"
	posts   map[string][]string // POST path -> the request id of every POST seen
	bodies  map[string][]string // POST path -> every POST body, byte for byte
	dropped int
	paths   []string // method + path of every request
	// cutEvents, when above 0, cuts the next events stream after that many
	// task events have gone through (then it is 0 again).
	cutEvents int
	lastIDs   []string // the Last-Event-ID of every events request
	// noEvents answers 404 to every events request, as a server without
	// the stream would.
	noEvents bool
	// failGets answers the next GETs of a path (as many as its count) 502
	// Bad Gateway with an HTML page, without forwarding them.
	failGets map[string]int
}

// cutWriter passes an events stream through and cancels it (the proxy
// then aborts the connection) once `left` task events have been written.
type cutWriter struct {
	http.ResponseWriter
	left   int
	cancel context.CancelFunc
}

func (w *cutWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	if w.left -= bytes.Count(b, []byte("event: task")); w.left <= 0 {
		w.Flush()
		w.cancel()
	}
	return n, err
}

func (w *cutWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *cutWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func newDropProxy(t *testing.T, addr string) *dropProxy {
	u, _ := url.Parse("http://" + addr)
	p := &dropProxy{target: u, rp: httputil.NewSingleHostReverseProxy(u), losing: map[string]string{}, posts: map[string][]string{}, bodies: map[string][]string{}, failGets: map[string]int{}}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// lose sets how the answers to POSTs of path are lost ("" forwards them).
func (p *dropProxy) lose(path, how string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.losing[path] = how
}

func (p *dropProxy) seen(path string) (posts []string, dropped int, paths []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.posts[path]), p.dropped, slices.Clone(p.paths)
}

func (p *dropProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.paths = append(p.paths, r.Method+" "+r.URL.Path)
	isPost := r.Method == http.MethodPost
	how := ""
	if isPost {
		how = p.losing[r.URL.Path]
	}
	cut := 0
	events := strings.HasSuffix(r.URL.Path, "/events")
	if events {
		p.lastIDs = append(p.lastIDs, r.Header.Get("Last-Event-ID"))
		cut, p.cutEvents = p.cutEvents, 0
	}
	noEvents := events && p.noEvents
	failGet := r.Method == http.MethodGet && p.failGets[r.URL.Path] > 0
	if failGet {
		p.failGets[r.URL.Path]--
	}
	p.mu.Unlock()
	if noEvents {
		http.NotFound(w, r)
		return
	}
	if failGet {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html><body><h1>502 Bad Gateway</h1></body></html>"))
		return
	}
	if cut > 0 {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		p.rp.ServeHTTP(&cutWriter{ResponseWriter: w, left: cut, cancel: cancel}, r.WithContext(ctx))
		return
	}
	if !isPost {
		p.rp.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var req struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(body, &req)
	p.mu.Lock()
	p.posts[r.URL.Path] = append(p.posts[r.URL.Path], req.RequestID)
	p.bodies[r.URL.Path] = append(p.bodies[r.URL.Path], string(body))
	p.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if how == "" {
		p.rp.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	p.rp.ServeHTTP(rec, r) // studio handles it completely
	p.mu.Lock()
	p.dropped++
	p.mu.Unlock()
	if how == "502" {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html><body><h1>502 Bad Gateway</h1></body></html>"))
		return
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, as a proxy that died would leave
	}
	conn.Close()
}

// page drives one browser tab; every helper fails the test on an error.
type page struct {
	t    *testing.T
	ctx  context.Context
	errs *pageErrors
}

func (p page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		var body string
		body, _ = chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.querySelector('main').innerText`))
		p.t.Fatalf("%v; the page shows:\n%s", err, body)
	}
}

// eval runs an expression in the page and decodes its value.
func eval[T any](p page, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (p page) text(sel string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

func (p page) attr(sel, name string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
	if err != nil {
		p.t.Fatalf("attribute %s of %s: %v", name, sel, err)
	}
	return v.Value
}

func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}
func click(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }

// setField sets an input's value as typing would, firing input and change.
func setField(sel, value string) chromedp.Action[chromedp.Void] {
	s, _ := json.Marshal(sel)
	v, _ := json.Marshal(value)
	a := chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%s); e.value = %s;
		e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, s, v))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// offline cuts the tab off the network (or back on), as DevTools'
// "Offline" does: requests fail and navigator.onLine is false.
func offline(on bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		conds := []*network.Conditions{}
		if on {
			conds = append(conds, &network.Conditions{Offline: true, DownloadThroughput: -1, UploadThroughput: -1})
		}
		if _, err := cdp.Call(ctx, t, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{MatchedNetworkConditions: conds}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, network.OverrideNetworkState, network.OverrideNetworkStateParams{Offline: on, DownloadThroughput: -1, UploadThroughput: -1})
		return err
	})
}

// waitJS waits until a boolean expression holds in the page: it is
// checked at once and again after every change of the document (a
// MutationObserver in the page), so the wait ends with the change that
// makes it true, not at the next tick of a timer. An expression that
// throws fails the test.
func (p page) waitJS(what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 90*time.Second)
	defer cancel()
	script := fmt.Sprintf(`new Promise((resolve, reject) => {
		const holds = () => Boolean(%s);
		const check = (mo) => {
			try {
				if (!holds()) return false;
			} catch (err) {
				reject(err);
			}
			if (mo) mo.disconnect();
			resolve(true);
			return true;
		};
		if (check(null)) return;
		const mo = new MutationObserver(() => check(mo));
		mo.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
	})`, expr)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](script, chromedp.EvalAwaitPromise)); err != nil {
		p.t.Fatalf("waiting for %s: %v; the page shows:\n%s", what, err, eval[string](p, `document.querySelector('main').innerText`))
	}
}

// screenshot saves the page as docs/img/NAME.png when
// STUDIO_UPDATE_SCREENSHOTS=1, so that ordinary runs leave the tree clean.
func (p page) screenshot(name string) {
	p.t.Helper()
	if os.Getenv("STUDIO_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := filepath.Join("..", "..", "docs", "img")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

type webBatch struct {
	ID        string         `json:"id"`
	RequestID string         `json:"request_id"`
	State     string         `json:"state"`
	TaskCount int            `json:"task_count"`
	Counts    map[string]int `json:"counts"`
}

func listBatches(t *testing.T, c *client) []webBatch {
	t.Helper()
	var list struct {
		Items []webBatch `json:"items"`
	}
	resp, err := c.do(context.Background(), "GET", "/v1/batches", nil, &list)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("list batches: %v %v", resp, err)
	}
	return list.Items
}

// TestWebStudio goes through the studio as a person would: sign in with the
// link serve prints, compose (typing), review, submit with the answer
// dropped by the proxy, submit again (one batch, same id), watch the batch
// page fill in as a worker started later drains it, pick and publish.
func TestWebStudio(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 1280, 900)
	defer p.noPageErrors()
	cfg := testConfig(t) // no workers: the batch waits until one starts
	m, stdout := startMain(t, cfg)
	token := readToken(t, cfg.Data)
	link := "http://" + m.Addr() + "/#token=" + token
	if !strings.Contains(stdout.String(), link) {
		t.Fatalf("serve did not print the sign-in link %s:\n%s", link, stdout.String())
	}
	proxy := newDropProxy(t, m.Addr())
	c := newClient(t, m.Addr(), token)

	// Sign in with the link (through the proxy); the token leaves the
	// address bar at once and stays in sessionStorage only.
	p.do(chromedp.Navigate(proxy.srv.URL+"/#token="+token), visible(`#compose`))
	hash := eval[string](p, `location.hash`)
	stored := eval[string](p, `sessionStorage.getItem('studio.token')`)
	local := eval[string](p, `JSON.stringify(localStorage)`)
	if strings.Contains(hash, "token") || stored != token || strings.Contains(local, token) {
		t.Fatalf("after the link: hash %q, sessionStorage %q, localStorage %q", hash, stored, local)
	}
	_, _, paths := proxy.seen("")
	for _, path := range paths {
		if strings.Contains(path, token) {
			t.Fatalf("the token reached the server in a request line: %s", path)
		}
	}

	// Every control of the form is reachable with Tab, in order, up to
	// Review.
	p.do(chromedp.Focus(chromedp.CSS(`#prompt`)))
	for i := 0; eval[string](p, `document.activeElement.id`) != "review"; i++ {
		if i == 30 {
			t.Fatalf("30 presses of Tab from the prompt never reached Review")
		}
		p.do(chromedp.KeyEvent("\t"))
	}

	// Compose: type the prompt, set frames, candidates, a subject, a seed
	// and params; the page counts the tasks against the limit.
	p.do(
		chromedp.SendKeys(chromedp.CSS(`#prompt`), "a knight in the rain, side view"),
		setField(`#set-0-collection`, "walk-cycle"),
		setField(`#set-0-frames`, "f01, f02"),
		setField(`#candidates`, "2"),
		setField(`#seed`, "7"),
		click(`#subject-knight`),
		setField(`#params`, `{"delay_ms": 150}`),
	)
	if tasks, limit := p.attr(`#task-count`, "data-tasks"), p.attr(`#task-count`, "data-limit"); tasks != "8" || limit != "600" {
		// 2 frames x 2 generators (auto) x 2 candidates
		t.Fatalf("the page counts %s tasks against a limit of %s; want 8 and 600", tasks, limit)
	}
	p.screenshot("compose")

	// Review: the frozen request and its id.
	p.do(click(`#review`), visible(`#frozen`))
	id, frozen := p.text(`#request-id`), p.text(`#frozen`)
	var req map[string]any
	if err := json.Unmarshal([]byte(frozen), &req); err != nil {
		t.Fatalf("the frozen request is not JSON: %v\n%s", err, frozen)
	}
	if req["request_id"] != id || len(id) != 36 || req["prompt"] != "a knight in the rain, side view" || req["candidates"] != 2.0 || req["seed"] != 7.0 {
		t.Fatalf("frozen request %v, id %q", req, id)
	}
	p.screenshot("review")

	// Submit with the keyboard (Submit has the focus); the proxy drops the
	// answer after studio made the batch.
	proxy.lose("/v1/generations", "reset")
	p.do(chromedp.KeyEvent("\r"), visible(`#lost`))
	posts, dropped, _ := proxy.seen("/v1/generations")
	if dropped < 1 || len(posts) < 1 {
		t.Fatalf("the proxy dropped %d answers of %d posts", dropped, len(posts))
	}
	if b := listBatches(t, c); len(b) != 1 || b[0].RequestID != id {
		t.Fatalf("after the lost answer studio has %+v; want the one batch of %s", b, id)
	}
	if again := p.text(`#submit`); again != "Submit again" {
		t.Fatalf("the button says %q after a lost answer", again)
	}
	p.screenshot("review-lost")
	// Submit again, and a proxy answers 502 this time: still lost, still
	// one batch.
	proxy.lose("/v1/generations", "502")
	p.do(click(`#submit`))
	p.waitJS("a 502 to be shown as a lost answer", `!!document.querySelector('#lost')?.innerText.includes('502') && !document.querySelector('#submit').disabled`)
	if b := listBatches(t, c); len(b) != 1 {
		t.Fatalf("after two lost answers studio has %d batches", len(b))
	}
	proxy.lose("/v1/generations", "")
	// Back to compose and review again, unchanged: the same id (a new one
	// could make a second batch).
	p.do(click(`#edit`), visible(`#compose`), click(`#review`), visible(`#request-id`))
	if again := p.text(`#request-id`); again != id || p.text(`#submit`) != "Submit again" {
		t.Fatalf("reviewing the unchanged request again gave id %s (was %s), button %q", again, id, p.text(`#submit`))
	}
	proxy.mu.Lock()
	proxy.cutEvents = 2 // the batch page's first stream breaks after two task events
	proxy.mu.Unlock()
	p.do(click(`#submit`), visible(`#grid .cell`))
	flash := p.text(`#flash`)
	posts, _, _ = proxy.seen("/v1/generations")
	if len(posts) < 3 {
		t.Fatalf("the proxy saw %d POSTs; want the reset one, the 502 one and the last", len(posts))
	}
	for _, got := range posts {
		if got != id {
			t.Fatalf("the posts carried ids %v; every one should be %s", posts, id)
		}
	}
	proxy.mu.Lock()
	bodies := slices.Clone(proxy.bodies["/v1/generations"])
	proxy.mu.Unlock()
	for i, b := range bodies {
		if b != frozen {
			t.Fatalf("POST %d sent\n%s\nnot the frozen request\n%s", i+1, b, frozen)
		}
	}
	batches := listBatches(t, c)
	if len(batches) != 1 || batches[0].RequestID != id || batches[0].TaskCount != 8 {
		t.Fatalf("studio has %+v; want exactly one batch of 8 tasks for %s", batches, id)
	}
	if !strings.Contains(flash, "already made this batch") {
		t.Fatalf("the batch page says %q; want it to say the retry was answered with the first batch", flash)
	}
	batchID := batches[0].ID

	// The batch page: every cell is there, with its size, before any task
	// has run.
	type rect struct{ X, Y, W, H float64 }
	const rects = `[...document.querySelectorAll('#grid .cell')].map((e) => { const r = e.getBoundingClientRect(); return {X: r.x, Y: r.y + scrollY, W: r.width, H: r.height}; })`
	before := eval[[]rect](p, rects)
	if len(before) != 8 {
		t.Fatalf("%d cells before the drain; want 8", len(before))
	}

	// A worker process starts; the page fills in without a reload.
	wcfg := cfg
	wcfg.Workers = 1
	// MutationObservers in the page note whether part of the batch was
	// ever shown, at every change of the grid, and what the status line
	// said while the stream reconnected.
	eval[bool](p, `(() => {
		window.partlyShown = false;
		new MutationObserver(() => {
			const n = document.querySelectorAll('#grid img[data-loaded]').length;
			if (n > 0 && n < 8) window.partlyShown = true;
		}).observe(document.querySelector('#grid'), {subtree: true, childList: true, attributes: true});
		window.reconnecting = '';
		const live = document.querySelector('#live');
		new MutationObserver(() => {
			if (live.dataset.state === 'reconnecting') window.reconnecting = live.textContent;
		}).observe(live, {subtree: true, childList: true, characterData: true, attributes: true});
		return true;
	})()`)
	w := NewMain(wcfg, modeWorker, io.Discard, io.Discard)
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	p.waitJS("all 8 thumbnails and the batch succeeded",
		`document.querySelectorAll('#grid img[data-loaded]').length === 8 && document.querySelector('#batch-state').dataset.state === 'succeeded'`)
	if !eval[bool](p, `window.partlyShown`) {
		t.Error("the page never showed part of the batch: it did not fill in as the worker drained")
	}
	after := eval[[]rect](p, rects)
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("cell %d moved or changed size as images arrived: %+v -> %+v", i, before[i], after[i])
		}
	}
	_, _, paths = proxy.seen("")
	if !slices.Contains(paths, "GET /v1/batches/"+batchID+"/events") || p.attr(`#live`, "data-streamed") != "true" {
		t.Errorf("the page did not follow the events stream (it shows %q); it asked for %v", p.text(`#live`), paths)
	}
	// The stream cut after two task events was resumed from the last id.
	proxy.mu.Lock()
	lastIDs := slices.Clone(proxy.lastIDs)
	proxy.mu.Unlock()
	if len(lastIDs) < 2 || lastIDs[0] != "" || lastIDs[1] == "" {
		t.Errorf("events requests carried Last-Event-ID %q; want none on the first, the last id seen on the reconnect", lastIDs)
	}
	said := eval[string](p, `window.reconnecting`)
	if said != "reconnecting… (the connection was lost)" && said != "reconnecting… (the server ended the stream)" {
		t.Errorf("while the stream reconnected the page said %q; want the reason it was lost, in people's words", said)
	}
	t.Logf("while the stream reconnected the page said %q", said)

	// Pick two images, the first with the keyboard only (Tab from the
	// channel list reaches the first thumbnail; Space picks it), and publish
	// them to the gallery.
	p.do(chromedp.Focus(chromedp.CSS(`#channel`)), chromedp.KeyEvent("\t"))
	if !eval[bool](p, `document.activeElement === document.querySelector('#grid .cells .cell:nth-child(1)')`) {
		t.Fatalf("Tab from the channel list reached %s, not the first thumbnail", eval[string](p, `document.activeElement.outerHTML.slice(0, 120)`))
	}
	p.do(chromedp.KeyEvent(" "))
	p.waitJS("Space to pick the thumbnail", `document.activeElement.getAttribute('aria-pressed') === 'true'`)
	p.do(click(`#grid .cells .cell:nth-child(2)`))
	if picked := p.text(`#picked`); picked != "2 images picked" {
		t.Fatalf("picked: %q", picked)
	}
	// The first answer to the publication is lost; Publish again sends the
	// same id: one publication.
	proxy.lose("/v1/publications", "reset")
	p.do(click(`#publish`))
	p.waitJS("the lost publication answer to be shown", `document.querySelector('#publish').innerText === 'Publish again' && !document.querySelector('#publish').disabled`)
	proxy.lose("/v1/publications", "")
	p.do(click(`#publish`))
	p.waitJS("the publication to succeed", `!!document.querySelector('#publications li [data-state="succeeded"]')`)
	if b := p.text(`#publish`); b != "Publish 2 to gallery" {
		t.Errorf("after publishing the button says %q", b)
	}
	p.screenshot("batch")
	gallery, _ := filepath.Glob(filepath.Join(cfg.Data, "gallery", "*", "*.png"))
	if len(gallery) != 2 {
		t.Fatalf("the gallery has %v; want the two picked images, published once", gallery)
	}
	pubPosts, _, _ := proxy.seen("/v1/publications")
	if len(pubPosts) < 2 || pubPosts[0] == "" || slices.ContainsFunc(pubPosts, func(id string) bool { return id != pubPosts[0] }) {
		t.Fatalf("publication POSTs carried ids %q; want one id, sent again", pubPosts)
	}
	var pubs struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if resp, err := c.do(context.Background(), "GET", "/v1/publications", nil, &pubs); err != nil || resp.StatusCode != 200 || len(pubs.Items) != 1 {
		t.Fatalf("publications: %v %v %+v; want exactly one", resp, err, pubs)
	}

	// The batches list, newest first, with state and counts.
	p.do(chromedp.Navigate(proxy.srv.URL+"/#/batches"), visible(`tr[data-batch]`))
	rows := eval[[]string](p, `[...document.querySelectorAll('tr[data-batch]')].map((r) => r.dataset.batch + ' ' + r.innerText.replace(/\s+/g, ' ').trim())`)
	if len(rows) != 1 || !strings.HasPrefix(rows[0], batchID+" ") || !strings.Contains(rows[0], "succeeded 8 / 8 8 0 0") {
		t.Fatalf("batches list: %q", rows)
	}
	if eval[bool](p, `document.querySelector('#more').offsetParent !== null`) {
		t.Error("the batches list offers more on its last page")
	}
	p.screenshot("batches")
}

// TestWebStudioRefusals: a bad token is refused at sign-in; a 409 (the
// reviewed id was taken by other input) and a 422 (a param the generators
// refuse) are shown with their problem detail and the fields at fault;
// editing makes a new request id.
func TestWebStudioRefusals(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 1280, 900)
	defer p.noPageErrors()
	cfg := testConfig(t)
	m, _ := startMain(t, cfg)
	token := readToken(t, cfg.Data)
	c := newClient(t, m.Addr(), token)

	// Sign in by pasting the token (a wrong one first); no navigation
	// shows before.
	p.do(chromedp.Navigate("http://"+m.Addr()+"/"), visible(`#token`))
	if eval[bool](p, `document.querySelector('#nav').offsetParent !== null`) {
		t.Error("the navigation shows before sign-in")
	}
	p.do(
		visible(`#token`),
		chromedp.SendKeys(chromedp.CSS(`#token`), "stu_not-a-token\r"),
		visible(`#signin [role="alert"]`),
		setField(`#token`, token),
		click(`#signin button[type="submit"]`),
		visible(`#compose`),
		setField(`#prompt`, "a robot"),
		setField(`#set-0-frames`, "a, a"),
		click(`#add-set`),
		setField(`#set-1-collection`, "run"),
		setField(`#set-1-frames`, "x, y"),
		click(`#review`),
		visible(`#compose [data-field]`),
	)
	// The page refuses what it can see itself (a repeated frame) and stays.
	if field := p.attr(`#compose [data-field]`, "data-field"); field != "sets[0].frames[1]" || eval[string](p, `location.hash`) != "#/compose" {
		t.Fatalf("a repeated frame: field %q, page %s", field, eval[string](p, `location.hash`))
	}
	if item := p.text(`#compose [data-field]`); item != `sets[0].frames[1]: repeats frame 1 ("a")` {
		t.Fatalf("a repeated frame is said %q", item)
	}
	p.do(setField(`#set-0-frames`, "a"))
	if tasks := p.attr(`#task-count`, "data-tasks"); tasks != "6" { // (1 + 2 frames) x 2 generators x 1 candidate
		t.Fatalf("two sets count %s tasks; want 6", tasks)
	}
	p.do(click(`#review`), visible(`#request-id`))
	id := p.text(`#request-id`)
	// Someone else binds that id to other input first.
	body := map[string]any{"request_id": id, "prompt": "something else", "sets": []map[string]any{{"collection": "c", "frames": []string{"x"}}}}
	if resp, err := c.do(context.Background(), "POST", "/v1/generations", body, nil); err != nil || resp.StatusCode != 201 {
		t.Fatalf("bind the id: %v %v", resp, err)
	}
	p.do(click(`#submit`), visible(`[data-problem-status="409"]`))
	detail := p.text(`[data-problem-status="409"] .problem`)
	if detail != "409 Conflict: The request ID already belongs to different input." || !eval[bool](p, `document.querySelector('#submit').disabled`) {
		t.Fatalf("409 shown as %q, or Submit still enabled", detail)
	}
	p.screenshot("review-409")

	// Edit: a param the generator refuses. The next review has a new id,
	// and the 422 names the field.
	p.do(
		click(`#edit`),
		visible(`#params`),
		setField(`#params`, `{"width": 5}`),
		click(`#review`),
		visible(`#request-id`),
	)
	id2 := p.text(`#request-id`)
	if id2 == id || id2 == "" {
		t.Fatalf("the edited request kept the id %s", id)
	}
	// The one field at fault is said once, in the detail, not again in
	// a list below it.
	p.do(click(`#submit`), visible(`[data-problem-status="422"]`))
	if fields := p.attr(`[data-problem-status="422"]`, "data-fields"); fields != "params.width" {
		t.Fatalf("the 422 names the fields %q; want params.width", fields)
	}
	if got := p.text(`[data-problem-status="422"] .problem`); got != "422 Unprocessable Entity: params.width: must be an integer from 16 to 2048." {
		t.Fatalf("the 422 says %q", got)
	}
	if n := eval[int](p, `document.querySelectorAll('[data-problem-status="422"] li').length`); n != 0 {
		t.Fatalf("the field stated in the detail is listed again (%d items)", n)
	}

	// Two fields at fault: the detail says how many, the list says each
	// as "field: message".
	p.do(
		click(`#edit`),
		visible(`#params`),
		setField(`#params`, `{"width": 5, "height": 5}`),
		click(`#review`),
		visible(`#request-id`),
		click(`#submit`),
		visible(`[data-problem-status="422"] li`),
	)
	if got := p.text(`[data-problem-status="422"] .problem`); got != "422 Unprocessable Entity: The request cannot be planned: 2 problems (see errors)." {
		t.Fatalf("two fields: the 422 says %q", got)
	}
	items := eval[[]string](p, `[...document.querySelectorAll('[data-problem-status="422"] li')].map((li) => li.textContent)`)
	if want := []string{"params.width: must be an integer from 16 to 2048", "params.height: must be an integer from 16 to 2048"}; !slices.Equal(items, want) {
		t.Fatalf("two fields listed as %q; want %q", items, want)
	}
	if b := listBatches(t, c); len(b) != 1 {
		t.Fatalf("studio has %d batches; want only the one bound by the other input", len(b))
	}

	// Offline: the page says so and keeps the id; back online, Submit
	// again makes the batch (the first try never left the browser: 201).
	p.do(click(`#edit`), visible(`#params`), setField(`#params`, `{}`), click(`#review`), visible(`#request-id`))
	id3 := p.text(`#request-id`)
	p.do(offline(true), click(`#submit`), visible(`#lost`))
	if lost := p.text(`#lost`); !strings.Contains(lost, "offline") || !strings.Contains(lost, id3) {
		t.Fatalf("offline shown as %q", lost)
	}
	p.do(offline(false), click(`#submit`), visible(`#flash`))
	if flash := p.text(`#flash`); !strings.Contains(flash, "studio made this batch from request "+id3) {
		t.Fatalf("after going back online: %q", flash)
	}
	if b := listBatches(t, c); len(b) != 2 || b[0].RequestID != id3 {
		t.Fatalf("studio has %+v; want the page's batch of %s and the other", b, id3)
	}

	// A link with another token does not silently replace this tab's.
	other, err := createToken(context.Background(), m.store, "mallory")
	if err != nil {
		t.Fatal(err)
	}
	p.do(chromedp.Navigate("http://"+m.Addr()+"/#token="+other), visible(`#link-confirm`), click(`#link-keep`), visible(`#compose`))
	if got := eval[string](p, `sessionStorage.getItem('studio.token')`); got != token {
		t.Fatalf("after keeping, the tab holds %q", got)
	}
	p.do(chromedp.Navigate("http://"+m.Addr()+"/#token="+other), visible(`#link-use`), click(`#link-use`), visible(`#compose`))
	if got := eval[string](p, `sessionStorage.getItem('studio.token')`); got != other {
		t.Fatalf("after choosing the link's token, the tab holds %q", got)
	}
}

// TestWebPageErrorsSeen: what noPageErrors holds the other tests to is
// seen: an exception thrown in a timer, a rejection nothing handles and a
// console.error call each count, once; console.warn and a refused fetch
// (the browser's own log) do not.
func TestWebPageErrorsSeen(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 800, 600)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refused" {
			http.Error(w, "no", http.StatusConflict)
			return
		}
		io.WriteString(w, "<!doctype html><title>t</title><main>page</main>")
	}))
	defer srv.Close()
	p.do(chromedp.Navigate(srv.URL + "/"))
	p.waitJS("the page's script ran", `(() => {
		if (!window.done) {
			window.done = fetch('/refused').then(() => {
				console.warn('only a warning');
				setTimeout(() => { throw new Error('thrown in a timer'); });
				Promise.reject(new Error('rejected, not handled'));
				console.error('logged', 'as an error');
				setTimeout(() => { document.body.dataset.done = '1'; }, 10);
			});
		}
		return document.body.dataset.done === '1';
	})()`)
	_, _ = chromedp.Run(p.ctx, chromedp.Evaluate[bool](`true`))
	p.errs.mu.Lock()
	seen := slices.Clone(p.errs.seen)
	p.errs.seen = nil
	p.errs.mu.Unlock()
	got := strings.Join(seen, "\n")
	for _, want := range []string{"thrown in a timer", "rejected, not handled", "console.error: logged as an error"} {
		if strings.Count(got, want) != 1 {
			t.Errorf("%q seen %d times in:\n%s", want, strings.Count(got, want), got)
		}
	}
	if len(seen) != 3 || strings.Contains(got, "only a warning") || strings.Contains(got, "409") {
		t.Errorf("seen %d errors, want 3:\n%s", len(seen), got)
	}
	p.noPageErrors()
}

// TestWebProblemRule: the page says a problem by the command line's rule,
// word for word: for each problem document, the headline the page shows is
// client.Error's Headline and its list items are client.Error's FieldLines.
func TestWebProblemRule(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 800, 600)
	defer p.noPageErrors()
	m, _ := startMain(t, testConfig(t))
	p.do(chromedp.Navigate("http://"+m.Addr()+"/"), visible(`#token`))
	fe := func(field, msg string) apiclient.FieldError { return apiclient.FieldError{Field: field, Message: msg} }
	cases := []apiclient.Error{
		{Status: 422, Title: "Unprocessable Entity", Detail: "params.width: must be an integer from 16 to 2048.",
			Errors: []apiclient.FieldError{fe("params.width", "must be an integer from 16 to 2048")}},
		{Status: 422, Title: "Unprocessable Entity", Detail: "The request cannot be planned: 2 problems (see errors).",
			Errors: []apiclient.FieldError{fe("providers[0]", `no generator or route "oil" in the catalog`), fe("subjects[0]", `subject "ghost" does not exist`)}},
		{Status: 400, Title: "Bad Request", Detail: "The request body is invalid",
			Errors: []apiclient.FieldError{fe("prompt", "must not be empty."), fe("sets", "must have 1 to 20 sets (has 0)..")}},
		{Status: 400, Title: "Bad Request", Detail: "seed must be at most 2^53-1.", Errors: []apiclient.FieldError{fe("seed", "must be at most 2^53-1")}},
		{Status: 409, Title: "Conflict", Detail: "The request ID already belongs to different input."},
		{Status: 400, Title: "Bad Request", Detail: "Is this a request?", Errors: []apiclient.FieldError{fe("", "the body is empty")}},
		{Status: 404, Title: "Not Found"},
		{Status: 422, Title: "Unprocessable Entity", Detail: "  Two problems.  ", Errors: []apiclient.FieldError{fe("a", " one. "), fe("b", "two")}},
	}
	type shown struct {
		Head  string
		Items []string
	}
	for _, c := range cases {
		doc, _ := json.Marshal(map[string]any{"title": c.Title, "status": c.Status, "detail": c.Detail, "errors": c.Errors})
		got, err := chromedp.Run(p.ctx, chromedp.Evaluate[shown](fmt.Sprintf(`(async () => {
			const {problemView} = await import('/ui/dom.js');
			const el = problemView({status: %d, problem: %s});
			return {Head: el.querySelector('.problem').textContent, Items: [...el.querySelectorAll('li')].map((li) => li.textContent)};
		})()`, c.Status, doc), chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		if want := (shown{Head: c.Headline(), Items: c.FieldLines()}); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
			t.Errorf("%s\nthe page shows %q\nthe CLI says  %q", doc, got, want)
		}
	}
}

// TestWebLostAnswerText: a call that got no usable answer reads as one
// sentence wherever the page says it, with the server's detail in it and
// one final period (a 503 to a POST carries a detail that ends with one).
func TestWebLostAnswerText(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 800, 600)
	defer p.noPageErrors()
	mux := http.NewServeMux()
	mux.Handle("/", web.Handler())
	mux.HandleFunc("/v1/busy", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The database is busy."}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	p.do(chromedp.Navigate(srv.URL + "/ui/index.html"))
	got, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](`(async () => {
		const {api} = await import('/ui/api.js');
		const {failureView} = await import('/ui/dom.js');
		try {
			await api('/v1/busy', {method: 'POST', body: '{}', auth: ''});
			return ['no error'];
		} catch (err) {
			return [err.name, err.reason, failureView(err, 'Cancel failed.').textContent];
		}
	})()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"LostAnswer", "the server or a proxy answered 503 Service Unavailable: The database is busy",
		"Cancel failed. No answer from studio: the server or a proxy answered 503 Service Unavailable: The database is busy."}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// TestWebUnreadableUpdate: an event of the batch's stream that is not
// JSON (a proxy's mangling) is said in people's words, not the parser's,
// and the batch page still follows the stream to its end.
func TestWebUnreadableUpdate(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 800, 600)
	defer p.noPageErrors()
	mux := http.NewServeMux()
	mux.Handle("/", web.Handler())
	mux.HandleFunc("/v1/batches/b/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: 1\nevent: task\ndata: {not json\n\nid: 2\nevent: done\ndata: {\"id\": \"b\", \"state\": \"succeeded\", \"counts\": {}}\n\n")
	})
	mux.HandleFunc("/v1/batches/b/tasks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"items": [], "next_cursor": null}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	p.do(chromedp.Navigate(srv.URL + "/ui/index.html"))
	if _, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`(async () => {
		const {liveView} = await import('/ui/batch/live.js');
		const {batchState} = await import('/ui/batch/state.js');
		const v = liveView(batchState({id: 'b', state: 'running', counts: {}}, []), '/v1/batches/b', new AbortController().signal);
		document.body.append(v.status, v.problems);
		return true;
	})()`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	p.waitJS("the stream followed to its end", `document.querySelector('#live').dataset.state === 'ended'`)
	if got, want := eval[string](p, `document.querySelector('#live-problems').textContent`),
		"An update could not be read; the tasks are read again. The update was not valid JSON."; got != want {
		t.Fatalf("the page says %q; want %q", got, want)
	}
}

// TestWebSSEParser feeds one stream to the page's events parser cut into
// pieces of every size (CRLF, LF and CR line ends, a CR and its LF in two
// pieces, comments, multi-line data, an event with no data, retry) and
// expects the same events each time.
func TestWebSSEParser(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 800, 600)
	defer p.noPageErrors()
	cfg := testConfig(t)
	m, _ := startMain(t, cfg)
	p.do(chromedp.Navigate("http://"+m.Addr()+"/"), visible(`#token`))
	type event struct {
		Type, Data string
		ID         *string
	}
	type result struct {
		Events []event
		Retry  int
	}
	const script = `(async () => {
		const {parser} = await import('/ui/sse.js');
		const text = ': ping\r\nid: 1\r\nevent: batch\r\ndata: {"a":1}\r\n\r\nevent: empty\n\nid: 2\nevent: task\ndata: line1\ndata:line2\n\n: ping\n\nretry: 5000\nid: 3\revent: done\rdata: x\r\r';
		const out = [];
		for (const size of [1, 2, 3, 5, 7, 11, 1000]) {
			const r = {Events: [], Retry: 0};
			const feed = parser((e) => r.Events.push({Type: e.type, Data: e.data, ID: e.id}), (ms) => { r.Retry = ms; });
			for (let i = 0; i < text.length; i += size) feed(text.slice(i, i + size));
			out.push(r);
		}
		return out;
	})()`
	got, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]result](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) *string { return &s }
	want := []event{{"batch", `{"a":1}`, id("1")}, {"task", "line1\nline2", id("2")}, {"done", "x", id("3")}}
	if len(got) != 7 {
		t.Fatalf("%d results", len(got))
	}
	for i, r := range got {
		ok := len(r.Events) == len(want) && r.Retry == 5000
		for j := 0; ok && j < len(want); j++ {
			e := r.Events[j]
			ok = e.Type == want[j].Type && e.Data == want[j].Data && e.ID != nil && *e.ID == *want[j].ID
		}
		if !ok {
			t.Errorf("cut %d: %+v", i, r)
		}
	}
}

// TestWebBatchState runs the batch page's state (web/static/batch/state.js)
// in the page: an older version of a task never replaces a newer one (by
// time, whatever its fraction digits, then queued < running < ended), only
// tasks with an image can be picked, and every change tells the
// subscribers what changed.
func TestWebBatchState(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 800, 600)
	defer p.noPageErrors()
	cfg := testConfig(t)
	m, _ := startMain(t, cfg)
	p.do(chromedp.Navigate("http://"+m.Addr()+"/"), visible(`#token`))
	type result struct {
		States, Picked, Assets, Notes []string
		Batch                         string
	}
	const script = `(async () => {
		const {batchState} = await import('/ui/batch/state.js');
		const task = (id, state, at, asset) => ({id, state, updated_at: at, asset_id: asset});
		const s = batchState({id: 'b', state: 'running'}, [
			task('a', 'queued', '2026-01-01T00:00:01Z'),
			task('b', 'succeeded', '2026-01-01T00:00:01.5Z', 'asset-b'),
			task('c', 'running', '2026-01-01T00:00:01Z'),
		]);
		const notes = [];
		s.subscribe((what, t) => notes.push(t ? what + ' ' + t.id + ' ' + t.state : what));
		s.putTask(task('b', 'running', '2026-01-01T00:00:01.50000Z')); // same instant, earlier state: dropped
		s.putTask(task('a', 'running', '2026-01-01T00:00:01.000Z')); // same instant, later state: kept
		s.putTask(task('a', 'queued', '2026-01-01T00:00:02Z')); // later time: kept, whatever the state
		s.putTask(task('c', 'succeeded', '2026-01-01T00:00:00.9Z', 'asset-c')); // earlier time: dropped
		s.toggle('a'); // no image: not picked
		s.toggle('b');
		const assets = s.pickedAssets();
		s.pickAll();
		s.clearPicks();
		s.toggle('b');
		s.setBatch({id: 'b', state: 'succeeded'});
		return {States: [...s.tasks.values()].map((t) => t.id + ' ' + t.state), Picked: [...s.picked], Assets: assets, Notes: notes, Batch: s.batch.state};
	})()`
	got, err := chromedp.Run(p.ctx, chromedp.Evaluate[result](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	want := result{
		States: []string{"a queued", "b succeeded", "c running"},
		Picked: []string{"b"},
		Assets: []string{"asset-b"},
		Notes:  []string{"task a running", "task a queued", "picked", "picked", "picked", "picked", "picked", "batch"},
		Batch:  "succeeded",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// TestWebStudioPolling: where the server has no events stream, the batch
// page polls; a poll that fails is shown and tried again, and the page
// still fills in and ends.
func TestWebStudioPolling(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 1280, 900)
	defer p.noPageErrors()
	cfg := testConfig(t) // no workers: the batch waits until one starts
	m, _ := startMain(t, cfg)
	token := readToken(t, cfg.Data)
	c := newClient(t, m.Addr(), token)
	proxy := newDropProxy(t, m.Addr())
	proxy.noEvents = true
	var b webBatch
	body := map[string]any{"request_id": "polled", "prompt": "a cat", "providers": []string{"sketch"},
		"sets": []map[string]any{{"collection": "c", "frames": []string{"a", "b"}}}}
	if resp, err := c.do(context.Background(), "POST", "/v1/generations", body, &b); err != nil || resp.StatusCode != 201 {
		t.Fatalf("create: %v %v", resp, err)
	}
	p.do(chromedp.Navigate(proxy.srv.URL+"/#token="+token), visible(`#compose`),
		chromedp.Navigate(proxy.srv.URL+"/#/batches/"+b.ID), visible(`#grid .cell`))
	p.waitJS("the page to poll", `document.querySelector('#live').dataset.state === 'polling'`)

	// The next read of the batch gets a gateway's 502.
	eval[bool](p, `(() => {
		window.problemShown = '';
		new MutationObserver(() => {
			const text = document.querySelector('#live-problems').innerText;
			if (text) window.problemShown = text;
		}).observe(document.querySelector('#live-problems'), {subtree: true, childList: true, characterData: true});
		return true;
	})()`)
	proxy.mu.Lock()
	proxy.failGets["/v1/batches/"+b.ID] = 1
	proxy.mu.Unlock()
	p.waitJS("the failed poll to be shown", `!!window.problemShown`)
	if shown := eval[string](p, `window.problemShown`); !strings.Contains(shown, "The batch could not be read; trying again.") || !strings.Contains(shown, "502") {
		t.Errorf("the failed poll was shown as %q", shown)
	}

	wcfg := cfg
	wcfg.Workers = 1
	w := NewMain(wcfg, modeWorker, io.Discard, io.Discard)
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	p.waitJS("both thumbnails, the batch succeeded and the polling ended",
		`document.querySelectorAll('#grid img[data-loaded]').length === 2 && document.querySelector('#batch-state').dataset.state === 'succeeded' && document.querySelector('#live').dataset.state === 'ended'`)
	if left := p.text(`#live-problems`); left != "" {
		t.Errorf("after a good poll the page still shows %q", left)
	}
	_, _, paths := proxy.seen("")
	if n := slices.Index(paths, "GET /v1/batches/"+b.ID+"/events"); n < 0 || slices.Contains(paths[n+1:], "GET /v1/batches/"+b.ID+"/events") {
		t.Errorf("the page asked for the events stream %v; want once, then polling", paths)
	}
}

// TestWebStudioCancelFailuresPhone: cancel from the batch page; failed
// tasks shown with their errors; on a phone-sized screen nothing is wider
// than the screen.
func TestWebStudioCancelFailuresPhone(t *testing.T) {
	t.Parallel()
	p := newBrowser(t, 1280, 900)
	defer p.noPageErrors()
	cfg := testConfig(t)
	cfg.MaxAttempts = 1
	m, _ := startMain(t, cfg)
	token := readToken(t, cfg.Data)
	c := newClient(t, m.Addr(), token)
	base := "http://" + m.Addr()
	create := func(requestID string, body map[string]any) webBatch {
		t.Helper()
		body["request_id"] = requestID
		var b webBatch
		if resp, err := c.do(context.Background(), "POST", "/v1/generations", body, &b); err != nil || resp.StatusCode != 201 {
			t.Fatalf("create %s: %v %v", requestID, resp, err)
		}
		return b
	}

	// Cancel a queued batch (no worker runs yet).
	queued := create("queued", map[string]any{"prompt": "a cat", "providers": []string{"sketch"},
		"sets": []map[string]any{{"collection": "c", "frames": []string{"a", "b", "c"}}}})
	p.do(chromedp.Navigate(base+"/#token="+token), visible(`#compose`),
		chromedp.Navigate(base+"/#/batches/"+queued.ID), visible(`#grid .cell`), click(`#cancel`))
	p.waitJS("the batch to show canceled", `document.querySelector('#batch-state').dataset.state === 'canceled'`)
	if s := p.text(`#stats`); !strings.Contains(s, "3 canceled") || !eval[bool](p, `document.querySelector('#cancel').disabled`) {
		t.Fatalf("after cancel: %q", s)
	}

	// A batch whose tasks fail (one attempt allowed, the first fails).
	failing := create("failing", map[string]any{"prompt": "a robot", "providers": []string{"sketch"}, "candidates": 2,
		"params": map[string]any{"fail_attempts": 1}, "sets": []map[string]any{{"collection": "c", "frames": []string{"a"}}}})
	wcfg := cfg
	wcfg.Workers = 2
	w := NewMain(wcfg, modeWorker, io.Discard, io.Discard)
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	p.do(chromedp.Navigate(base+"/#/batches/"+failing.ID), visible(`#grid .cell`))
	p.waitJS("the failed tasks to be listed", `document.querySelectorAll('#failed li').length === 2`)
	if s := p.text(`#failed`); !strings.Contains(s, "Failed tasks (2)") || !strings.Contains(s, "1 attempt") {
		t.Fatalf("failed tasks shown as %q", s)
	}
	if n := eval[int](p, `document.querySelectorAll('#grid .cell.failed .why').length`); n != 2 {
		t.Fatalf("%d failed cells show their error", n)
	}

	// A phone: 390 px wide. Nothing overflows sideways on any page.
	p.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	for _, route := range []string{"#/batches/" + queued.ID, "#/compose", "#/batches"} {
		p.do(chromedp.Navigate(base+"/"+route), visible(`main h1`))
		p.waitJS("the page to render", `!!document.querySelector('main [id], main table')`)
		if wide := eval[bool](p, `document.documentElement.scrollWidth > window.innerWidth`); wide {
			t.Errorf("%s is wider than a 390 px screen (%v > 390)", route, eval[int](p, `document.documentElement.scrollWidth`))
		}
	}
	p.do(chromedp.Navigate(base + "/#/batches/" + failing.ID))
	p.waitJS("the failed batch", `document.querySelectorAll('#failed li').length === 2`)
	p.screenshot("batch-phone")
}
