package httpapi

import (
	"bytes"
	"log/slog"
	"net/http"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json"
)

const (
	contentTypeJSON    = "application/json"
	contentTypeProblem = "application/problem+json"
)

// answerBufs holds the buffers answers are encoded into, so that an
// answer costs no allocation of its bytes (and no second one for the
// final newline).
var answerBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer is the largest buffer put back in answerBufs: a rare
// large answer (a long list) is left to the collector.
const maxPooledAnswer = 64 << 10

// writeJSON encodes v before writing anything, so that a value that cannot
// be encoded becomes a clean 500 instead of half a body.
func writeJSON(w http.ResponseWriter, r *http.Request, log *slog.Logger, contentType string, status int, v any) {
	buf := answerBufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			answerBufs.Put(buf)
		}
	}()
	var body []byte
	err := json.MarshalWrite(buf, v)
	if err == nil {
		buf.WriteByte('\n')
		body = buf.Bytes()
	} else {
		log.LogAttrs(r.Context(), slog.LevelError, "encode answer",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.String("error", err.Error()))
		contentType, status = contentTypeProblem, http.StatusInternalServerError
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"Internal error."}` + "\n")
	}
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
