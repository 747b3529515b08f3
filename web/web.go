// Package web is the web studio: one page of plain HTML, CSS and
// JavaScript modules, embedded in the binary and served by `studio serve`
// at / (the page) and /ui/NAME (its files). There is no build step: the
// files under static/ are what the browser runs.
//
// The page talks to the /v1 API from the browser with the bearer token the
// user signed in with (kept in sessionStorage), so the handler here needs
// no token and serves nothing but these files. Every answer carries a strict
// Content-Security-Policy (CSP): scripts, styles and connections only from
// this origin, images from this origin and blob: URLs (asset bytes need the
// token, so the page fetches them and shows them as blobs), no inline
// script or style, no frames, no plugins.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// CSP is the Content-Security-Policy of every answer of the handler.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// file is one embedded file, ready to serve.
type file struct {
	body        []byte
	etag        string
	contentType string
}

// contentTypes maps the extensions under static/ to their media types (the
// system's MIME table is not consulted, so answers are the same anywhere).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
}

// Handler serves the studio: GET / is the page, GET /ui/NAME a file of
// static/. Anything else answers 404.
func Handler() http.Handler {
	files := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		files[strings.TrimPrefix(p, "static/")] = file{body: body, etag: `"` + hex.EncodeToString(sum[:16]) + `"`, contentType: ct}
		return nil
	})
	if err != nil {
		// The files are compiled in: failing to read them is a broken build.
		panic("web: read embedded files: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		name := ""
		switch {
		case r.URL.Path == "/":
			name = "index.html"
		case strings.HasPrefix(r.URL.Path, "/ui/"):
			name = strings.TrimPrefix(r.URL.Path, "/ui/")
		}
		f, ok := files[name]
		if !ok || name == "" {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			h.Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("404 page not found\n"))
			return
		}
		// The files change only with the binary: revalidate every time
		// (cheap, with the ETag) so an upgrade is never half-applied.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		h.Set("Content-Type", f.contentType)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
	})
}
