package httpapi

import (
	"log/slog"
	"net/http"
	"strconv"

	"github.com/go-json-experiment/json"
)

const (
	contentTypeJSON    = "application/json"
	contentTypeProblem = "application/problem+json"
)

// writeJSON encodes v before writing anything, so that a value that cannot
// be encoded becomes a clean 500 instead of half a body.
func writeJSON(w http.ResponseWriter, r *http.Request, log *slog.Logger, contentType string, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		log.LogAttrs(r.Context(), slog.LevelError, "encode answer",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.String("error", err.Error()))
		contentType, status = contentTypeProblem, http.StatusInternalServerError
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"Internal error."}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// ok writes a normal JSON answer.
func (s *Server) ok(w http.ResponseWriter, r *http.Request, status int, v any) {
	writeJSON(w, r, s.log, contentTypeJSON, status, v)
}
