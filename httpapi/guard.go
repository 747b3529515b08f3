package httpapi

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"studio/intent"
)

// This file holds the guards against slow or odd clients: the deadline to
// read a body, closing connections whose body was not read, the deadline
// of each write, HEAD served as GET, and bodies in an encoding studio does
// not decode.

// watchedBody is a request body that remembers whether it was read to its
// end, and clears the body's read deadline once it was (past the body, the
// connection belongs to net/http's own reads again).
type watchedBody struct {
	io.ReadCloser
	done    atomic.Bool
	clear   *http.ResponseController // nil: no read deadline to clear
	timeout time.Duration
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		if b.done.CompareAndSwap(false, true) && b.clear != nil {
			_ = b.clear.SetReadDeadline(time.Time{})
		}
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		err = intent.Errorf(intent.ETimeout, "The body did not arrive within %v.", b.timeout)
	}
	return n, err
}

// read says whether the body was read to its end.
func (b *watchedBody) read() bool { return b.done.Load() }

// hasBody says whether a request declares a body (a length, or chunks).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// guardBody bounds the time to read r's body (when it has one) and
// watches it: r is the middleware's own copy of the request, whose Body
// it replaces. It returns the watched body, or nil.
func (s *Server) guardBody(w http.ResponseWriter, r *http.Request, start time.Time) *watchedBody {
	if !hasBody(r) {
		return nil
	}
	b := &watchedBody{ReadCloser: r.Body, timeout: s.limits.BodyTimeout}
	if s.limits.BodyTimeout > 0 {
		rc := http.NewResponseController(w)
		// Not every ResponseWriter has deadlines (a test recorder has
		// none); without one there is nothing to bound.
		if rc.SetReadDeadline(start.Add(s.limits.BodyTimeout)) == nil {
			b.clear = rc
		}
	}
	r.Body = b
	return b
}

// headAsGet routes HEAD as GET (no route registers HEAD): RFC 9110 §9.3.2
// asks HEAD wherever GET is served. The handler's body is dropped here
// (net/http would drop it too, but not every ResponseWriter does).
func headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			if rctx := chi.RouteContext(r.Context()); rctx != nil {
				rctx.RouteMethod = http.MethodGet
			}
			w = headWriter{w}
		}
		next.ServeHTTP(w, r)
	})
}

// headWriter drops the body of a HEAD answer; like net/http, it still
// sniffs the Content-Type the GET answer would have had.
type headWriter struct{ http.ResponseWriter }

func (w headWriter) Write(p []byte) (int, error) {
	if h := w.Header(); len(p) > 0 && h.Get("Content-Type") == "" {
		h.Set("Content-Type", http.DetectContentType(p))
	}
	return len(p), nil
}

// Unwrap lets http.ResponseController reach the real writer.
func (w headWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refuseEncodings answers 415 to a body with a Content-Encoding other than
// identity: studio decodes none, and reading gzip as JSON or as an image
// would only give a confusing error.
func (s *Server) refuseEncodings(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, v := range r.Header.Values("Content-Encoding") {
			for _, enc := range strings.Split(v, ",") {
				if enc = strings.TrimSpace(enc); enc != "" && !strings.EqualFold(enc, "identity") {
					s.Error(w, r, intent.Errorf(intent.EUnsupportedMedia,
						"The body has Content-Encoding %q; studio takes bodies without a Content-Encoding.", truncate(enc, 40)))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// truncate shortens a client's string for an answer, as valid UTF-8.
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strings.ToValidUTF8(s, "")
}
