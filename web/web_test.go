package web

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestServesFilesWithCSP(t *testing.T) {
	t.Parallel()
	h := Handler()
	for path, ctype := range map[string]string{
		"/":                  "text/html; charset=utf-8",
		"/ui/app.js":         "text/javascript; charset=utf-8",
		"/ui/sse.js":         "text/javascript; charset=utf-8",
		"/ui/style.css":      "text/css; charset=utf-8",
		"/ui/icon.svg":       "image/svg+xml",
		"/ui/compose.js":     "text/javascript; charset=utf-8",
		"/ui/router.js":      "text/javascript; charset=utf-8",
		"/ui/batch/state.js": "text/javascript; charset=utf-8",
	} {
		w := get(t, h, path)
		if w.Code != 200 || w.Header().Get("Content-Type") != ctype || w.Body.Len() == 0 {
			t.Errorf("GET %s: %d %q, %d bytes", path, w.Code, w.Header().Get("Content-Type"), w.Body.Len())
		}
		if w.Header().Get("Content-Security-Policy") != CSP || w.Header().Get("Referrer-Policy") != "no-referrer" ||
			w.Header().Get("Cache-Control") != "no-cache" || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", path, w.Header())
		}
		etag := w.Header().Get("ETag")
		if w := get(t, h, path, "If-None-Match", etag); etag == "" || w.Code != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %s: %d", path, etag, w.Code)
		}
	}
	for _, path := range []string{"/ui/", "/ui/nope.js", "/index.html", "/ui/../web.go", "/static/app.js"} {
		if w := get(t, h, path); w.Code != http.StatusNotFound || w.Header().Get("Content-Security-Policy") != CSP {
			t.Errorf("GET %s: %d", path, w.Code)
		}
	}
}

// TestCSPIsStrict pins the policy's parts that matter: nothing inline,
// nothing from elsewhere, images from here and blob: only.
func TestCSPIsStrict(t *testing.T) {
	t.Parallel()
	dirs := map[string]string{}
	for _, d := range strings.Split(CSP, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		dirs[name] = value
	}
	want := map[string]string{
		"default-src": "'none'", "script-src": "'self'", "style-src": "'self'", "img-src": "'self' blob:",
		"connect-src": "'self'", "base-uri": "'none'", "frame-ancestors": "'none'", "form-action": "'self'",
	}
	for k, v := range want {
		if dirs[k] != v {
			t.Errorf("%s is %q; want %q", k, dirs[k], v)
		}
	}
	if strings.Contains(CSP, "unsafe") || strings.Contains(CSP, "http") || strings.Contains(CSP, "data:") {
		t.Errorf("CSP allows too much: %s", CSP)
	}
}

// TestNoInlineCodeOrRemoteLoads checks the files themselves: the page has
// no inline script, style or handler (the CSP would block them anyway: this
// finds them before a browser does), nothing loads from another origin, and
// the scripts never turn text into markup or code.
func TestNoInlineCodeOrRemoteLoads(t *testing.T) {
	t.Parallel()
	inlineScript := regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`)
	checks := []struct {
		name string
		re   *regexp.Regexp
		ext  string
	}{
		{"an inline script", inlineScript, ".html"},
		{"a script without src", regexp.MustCompile(`<script(?:(?:\s(?:type|defer|async)(?:="[^"]*")?)*)>`), ".html"},
		{"a style element or attribute", regexp.MustCompile(`<style|\sstyle=`), ".html"},
		{"an inline event handler", regexp.MustCompile(`\son[a-z]+=`), ".html"},
		{"a remote URL", regexp.MustCompile(`(?:src|href)="(?:https?:)?//|@import|url\(\s*['"]?(?:https?:)?//`), ""},
		{"innerHTML, outerHTML, insertAdjacentHTML or document.write", regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write`), ".js"},
		{"eval or new Function", regexp.MustCompile(`\beval\(|new Function\(`), ".js"},
		{"localStorage (the token lives in sessionStorage only)", regexp.MustCompile(`localStorage`), ".js"},
	}
	n := 0
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		for _, c := range checks {
			if (c.ext == "" || strings.HasSuffix(p, c.ext)) && c.re.Match(b) {
				t.Errorf("%s has %s: %q", p, c.name, c.re.Find(b))
			}
		}
		return nil
	})
	if err != nil || n < 8 {
		t.Fatalf("walked %d files: %v", n, err)
	}
	// The checks can fail.
	if !inlineScript.MatchString(`<script>alert(1)</script>`) || inlineScript.MatchString(`<script type="module" src="/ui/app.js"></script>`) {
		t.Fatal("the inline-script check is broken")
	}
}
