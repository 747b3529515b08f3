package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"studio/store"
)

// ctxKey keys the values this package puts in a request's context.
type ctxKey int

const (
	actorKey  ctxKey = iota // string: the authenticated actor
	recordKey               // *RequestRecord: filled in as the request goes
)

// ActorFrom returns the authenticated actor of a request's context.
func ActorFrom(ctx context.Context) (string, bool) {
	if rec, ok := ctx.Value(recordKey).(*RequestRecord); ok {
		return rec.Actor, rec.Actor != ""
	}
	a, ok := ctx.Value(actorKey).(string)
	return a, ok && a != ""
}

// withActor returns ctx carrying the actor. A request that has a record
// (every one the router serves) keeps it there, where the request log
// reads it too, and its context is returned unchanged: no copy of the
// request for one more value.
func withActor(ctx context.Context, actor string) context.Context {
	if rec, ok := ctx.Value(recordKey).(*RequestRecord); ok {
		rec.Actor = actor
		return ctx
	}
	return context.WithValue(ctx, actorKey, actor)
}

// noteRequestID records the intent's request id for the request log.
func noteRequestID(ctx context.Context, id string) {
	if rec, ok := ctx.Value(recordKey).(*RequestRecord); ok {
		rec.RequestID = id
	}
}

// logRequests writes one log line per request (method, route pattern,
// status, duration, actor, request id; never a token or a body) and hands
// the same record to Config.Observe.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &RequestRecord{Method: r.Method}
		ctx := context.WithValue(r.Context(), recordKey, rec)
		ctx = store.WithWait(ctx, s.limits.DBWait) // a 503 past it, not a long hang
		r = r.WithContext(ctx)                     // a copy: ours to change
		body := s.guardBody(w, r, start)
		sw := &statusWriter{ResponseWriter: w, body: body, stall: s.limits.WriteStall}
		next.ServeHTTP(sw, r)
		sw.finish()
		rec.Duration = time.Since(start)
		rec.Status = sw.status()
		if rctx := chi.RouteContext(r.Context()); rctx != nil {
			rec.Route = rctx.RoutePattern()
		}
		attrs := make([]slog.Attr, 0, 6) // room for the actor and request id: one allocation
		attrs = append(attrs,
			slog.String("method", truncate(rec.Method, 40)), // a made-up method may be long
			slog.String("route", rec.Route),
			slog.Int("status", rec.Status),
			slog.Duration("duration", rec.Duration))
		if rec.Actor != "" {
			attrs = append(attrs, slog.String("actor", rec.Actor))
		}
		if rec.RequestID != "" {
			attrs = append(attrs, slog.String("request_id", rec.RequestID))
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
		if rec.Status < 500 && rec.Fault == "" && usesDatabase(r.URL.Path) {
			// Only a write that succeeded proves the database takes writes
			// again: a refusal (4xx) or a replay may have only read.
			wrote := r.Method != http.MethodGet && r.Method != http.MethodHead &&
				rec.Status < 300 && w.Header().Get("Idempotent-Replayed") == ""
			if wrote {
				s.outage.OK()
			} else {
				s.outage.ReadOK()
			}
		}
		if rec.Status < 500 && rec.Fault == "" && usesAssetStore(r) {
			s.assetOutage.OK()
		}
		if s.observe != nil {
			s.observe(*rec)
		}
	})
}

// recoverPanics turns a handler's panic into a logged 500, except
// http.ErrAbortHandler, which net/http uses to drop a connection.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.Error(w, r, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
		}()
		next.ServeHTTP(w, r)
	})
}

// commonHeaders sets the headers every answer carries.
func commonHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// statusWriter remembers the status written through it. It also closes
// the connection after an answer sent before the request's body was read
// (net/http would otherwise wait for the rest of the body to reuse the
// connection), and bounds each write: one that makes no progress for stall
// ends the answer.
type statusWriter struct {
	http.ResponseWriter
	code     int
	body     *watchedBody  // nil: the request has no body
	stall    time.Duration // <= 0: writes are not bounded
	deadline bool          // a write deadline is set
	rc       *http.ResponseController
}

// controller is the writer's ResponseController, made once.
func (w *statusWriter) controller() *http.ResponseController {
	if w.rc == nil {
		w.rc = http.NewResponseController(w.ResponseWriter)
	}
	return w.rc
}

// beforeHeader runs once, before the status line is written.
func (w *statusWriter) beforeHeader() {
	if w.body != nil && !w.body.read() {
		w.Header().Set("Connection", "close")
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.beforeHeader()
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.beforeHeader()
		w.code = http.StatusOK
	}
	if w.stall > 0 {
		if w.controller().SetWriteDeadline(time.Now().Add(w.stall)) == nil {
			w.deadline = true
		}
	}
	return w.ResponseWriter.Write(b)
}

// finish runs when the handler returned: an answer with no write still
// closes a connection whose body was not read (at once), and what the answer left
// buffered is sent under the last write's deadline before the deadline is
// cleared for the connection's next request.
func (w *statusWriter) finish() {
	if w.code == 0 {
		w.beforeHeader()
	}
	if w.deadline {
		_ = w.controller().Flush()
		_ = w.controller().SetWriteDeadline(time.Time{})
	}
	if w.body != nil && !w.body.read() {
		// net/http reads what is left of a small body before it closes the
		// connection; a body that never comes would hold it until the body
		// deadline. The answer is sent: stop reading now.
		_ = w.controller().SetReadDeadline(time.Now())
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// status is the answered status: 200 when the handler wrote nothing.
func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// usesDatabase says whether a request to path reads the database (so that
// its success ends an outage): the API's routes, the gallery and the
// readiness check.
func usesDatabase(path string) bool {
	return strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, "/gallery/") || path == "/readyz"
}

// usesAssetStore says whether a request reads or writes asset bytes (its
// success ends an outage of the asset store): asset content, gallery files
// and uploads.
func usesAssetStore(r *http.Request) bool {
	return (r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/assets/") && strings.HasSuffix(r.URL.Path, "/content")) ||
		(r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/gallery/") && !strings.HasSuffix(r.URL.Path, "/manifest.json")) ||
		(r.Method == http.MethodPost && r.URL.Path == "/v1/uploads")
}
