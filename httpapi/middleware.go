package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/go-chi/chi/v5"
)

// ctxKey keys the values this package puts in a request's context.
type ctxKey int

const (
	actorKey  ctxKey = iota // string: the authenticated actor
	recordKey               // *RequestRecord: filled in as the request goes
)

// ActorFrom returns the authenticated actor of a request's context.
func ActorFrom(ctx context.Context) (string, bool) {
	a, ok := ctx.Value(actorKey).(string)
	return a, ok && a != ""
}

// withActor returns ctx carrying the actor, and notes it for the request log.
func withActor(ctx context.Context, actor string) context.Context {
	if rec, ok := ctx.Value(recordKey).(*RequestRecord); ok {
		rec.Actor = actor
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
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), recordKey, rec)))
		rec.Duration = time.Since(start)
		rec.Status = sw.status()
		if rctx := chi.RouteContext(r.Context()); rctx != nil {
			rec.Route = rctx.RoutePattern()
		}
		attrs := []slog.Attr{
			slog.String("method", rec.Method),
			slog.String("route", rec.Route),
			slog.Int("status", rec.Status),
			slog.Duration("duration", rec.Duration),
		}
		if rec.Actor != "" {
			attrs = append(attrs, slog.String("actor", rec.Actor))
		}
		if rec.RequestID != "" {
			attrs = append(attrs, slog.String("request_id", rec.RequestID))
		}
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
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

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
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
