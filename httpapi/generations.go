package httpapi

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"

	"studio/intent"
)

// createGeneration is POST /v1/generations.
func (s *Server) createGeneration(w http.ResponseWriter, r *http.Request) {
	serveIntent(s, w, r, intent.DecodeGeneration,
		func(ctx context.Context, actor, requestID string, in intent.GenerationInput) (any, string, bool, error) {
			res, err := s.gens.CreateGeneration(ctx, actor, requestID, in)
			return res.Batch, batchLocation(res.Batch.ID), res.Replayed, err
		})
}

// serveIntent answers an intent POST (a generation, a publication) in the
// order the contract fixes: 415 (media type), 413 (size, while reading),
// 400 (body and request id), and only then create (409, 422); then 201
// with Location, or 200 with Idempotent-Replayed for a replay.
func serveIntent[In any](s *Server, w http.ResponseWriter, r *http.Request,
	decode func(body []byte) (requestID string, requestIDSet bool, in In, err error),
	create func(ctx context.Context, actor, requestID string, in In) (record any, location string, replayed bool, err error),
) {
	if err := requireJSON(r); err != nil {
		s.Error(w, r, err)
		return
	}
	body, err := readBody(w, r, s.limits.GenerationBody)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	bodyID, bodySet, in, err := decode(body)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	requestID, err := requestIDOf(r, bodyID, bodySet)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	noteRequestID(r.Context(), requestID)
	actor, _ := ActorFrom(r.Context())
	record, location, replayed, err := create(r.Context(), actor, requestID, in)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		s.ok(w, r, http.StatusOK, record)
		return
	}
	w.Header().Set("Location", location)
	s.ok(w, r, http.StatusCreated, record)
}

// batchLocation is the path of a batch.
func batchLocation(id string) string {
	return "/v1/batches/" + url.PathEscape(id)
}

// requireJSON refuses (415) a body whose Content-Type is missing or is not
// application/json; parameters such as charset are allowed, +json types are
// not.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == contentTypeJSON {
		return nil // the common case, without a parse
	}
	if ct == "" {
		return intent.Errorf(intent.EUnsupportedMedia, "The body must be application/json; the request has no Content-Type.")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != contentTypeJSON {
		return intent.Errorf(intent.EUnsupportedMedia, "The body must be application/json.")
	}
	return nil
}

// readBody reads the whole body, refusing (413) one over limit bytes: at
// once when the declared length says so, otherwise as soon as the reading
// passes the limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	tooLarge := func() error {
		return intent.Errorf(intent.ETooLarge, "The body is over its limit of %d bytes.", limit)
	}
	if r.ContentLength > limit {
		return nil, tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge()
		}
		if e, ok := errors.AsType[*intent.Error](err); ok {
			return nil, e // the body's deadline passed (408)
		}
		return nil, intent.Errorf(intent.EInvalid, "The body could not be read.")
	}
	return body, nil
}

// requestIDOf resolves the request id from the body and the
// Idempotency-Key header (one of them, or both when they agree).
func requestIDOf(r *http.Request, bodyID string, bodySet bool) (string, error) {
	vals := r.Header.Values("Idempotency-Key")
	var headerID string
	if len(vals) > 1 {
		return "", &intent.Error{Code: intent.EInvalid, Message: "The request ID is not valid.",
			Fields: []intent.FieldError{{Field: "Idempotency-Key", Message: "must appear at most once"}}}
	}
	if len(vals) == 1 {
		var err error
		if headerID, err = intent.ParseIdempotencyKey(vals[0]); err != nil {
			return "", err
		}
	}
	return intent.ResolveRequestID(bodyID, bodySet, headerID, len(vals) == 1)
}
