package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"studio/apperr"
	"studio/blob"
	"studio/intent"
	"studio/store"
)

// assetStoreRetryAfter is the Retry-After, in seconds, of a 503 for
// asset bytes that fail their check.
const assetStoreRetryAfter = 5

// statusOf is the one map from domain error code to HTTP status. Handlers
// never choose an error status themselves: they return a domain error and
// Error writes it.
var statusOf = map[string]int{
	apperr.EInvalid:          http.StatusBadRequest,
	apperr.EUnauthorized:     http.StatusUnauthorized,
	apperr.ENotFound:         http.StatusNotFound,
	apperr.EConflict:         http.StatusConflict,
	apperr.ETimeout:          http.StatusRequestTimeout,
	apperr.ETooLarge:         http.StatusRequestEntityTooLarge,
	apperr.EUnsupportedMedia: http.StatusUnsupportedMediaType,
	apperr.EUnprocessable:    http.StatusUnprocessableEntity,
	apperr.EGone:             http.StatusGone,
	apperr.ELocked:           http.StatusLocked,
	apperr.ETooMany:          http.StatusTooManyRequests,
	apperr.EUnavailable:      http.StatusServiceUnavailable,
	apperr.EInternal:         http.StatusInternalServerError,
}

// Problem is an RFC 9457 problem document, the body of every error answer.
type Problem struct {
	// Type is "about:blank": the status and title say what went wrong.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Errors lists the fields at fault, for validation errors only.
	Errors []intent.FieldError `json:"errors,omitempty"`
}

// Error writes err as an application/problem+json answer. The status comes
// from the error's domain code (anything that is not an *intent.Error is
// internal). Internal errors are logged with their details and answered
// with a generic detail only; other errors are the caller's and are not
// logged here (the request log line records their status).
//
// A dependency fault (store.FaultOf: the database busy, unreachable, full,
// read-only) is answered by writeFault instead: 503 or 507 with
// Retry-After, never 500.
func (s *Server) Error(w http.ResponseWriter, r *http.Request, err error) {
	if f := store.FaultOf(err); f != nil && intent.ErrorCode(err) == intent.EInternal {
		s.writeFault(w, r, f)
		return
	}
	if intent.ErrorCode(err) == intent.EInternal {
		switch {
		// (An asset store that is down is a fault, answered above.)
		case errors.Is(err, blob.ErrCorrupt):
			// Stored bytes that fail their SHA-256 (a disk fault, an object
			// replaced behind studio's back) are refused, never served; an
			// operator restores them (docs/operations.md).
			s.log.LogAttrs(r.Context(), slog.LevelError, "asset bytes corrupt",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
			if rec, ok := r.Context().Value(recordKey).(*RequestRecord); ok {
				rec.Fault = FaultAssetCorrupt
			}
			w.Header().Set("Retry-After", strconv.Itoa(assetStoreRetryAfter))
			err = intent.Errorf(intent.EUnavailable, "The asset's stored bytes fail their SHA-256 check; they are not served.")
		}
	}
	code := intent.ErrorCode(err)
	status, ok := statusOf[code]
	if !ok {
		status = http.StatusInternalServerError
		code = intent.EInternal
	}
	detail := intent.ErrorMessage(err)
	if code == intent.EInternal {
		detail = "Internal error."
		level := slog.LevelError
		if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
			// The caller went away; nothing is wrong with the server.
			level = slog.LevelDebug
		}
		s.log.LogAttrs(r.Context(), level, "internal error",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.String("error", err.Error()))
	}
	p := Problem{
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Errors: intent.ErrorFields(err),
	}
	s.writeProblem(w, r, p)
}

// writeProblem writes a problem document with its own status. The 405
// answer, which has no domain code (only the router knows a path exists
// with other methods), uses it directly.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	writeJSON(w, r, s.log, "application/problem+json", p.Status, p)
}

// notFoundAs gives a store's not-found the detail the API answers, naming
// the kind of record. It is the same for a record that does not exist and
// for another actor's, so the answer tells the two apart in no way.
func notFoundAs(err error, what string) error {
	if intent.ErrorCode(err) == intent.ENotFound {
		return intent.Errorf(intent.ENotFound, "No %s with this id.", what)
	}
	return err
}
