package httpapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"

	"studio/intent"
)

// createGeneration is POST /v1/generations.
func (s *Server) createGeneration(w http.ResponseWriter, r *http.Request) {
	serveIntent(s, w, r, intentRoute[intent.GenerationInput]{
		op:     intent.OpGeneration,
		decode: intent.DecodeGeneration,
		create: func(ctx context.Context, actor, requestID string, in intent.GenerationInput) (intentAnswer, error) {
			res, err := s.gens.CreateGeneration(ctx, actor, requestID, in)
			return generationAnswer(res), err
		},
		replay: func(ctx context.Context, actor, requestID, fp string) (intentAnswer, bool, error) {
			res, ok, err := s.gens.ReplayGeneration(ctx, actor, requestID, fp)
			return generationAnswer(res), ok, err
		},
	})
}

func generationAnswer(res intent.GenerationResult) intentAnswer {
	return intentAnswer{record: res.Batch, location: batchLocation(res.Batch.ID), replayed: res.Replayed, fingerprint: res.Fingerprint}
}

// intentRoute is one intent operation as serveIntent serves it.
type intentRoute[In any] struct {
	op     string // intent.OpGeneration or intent.OpPublication
	decode func(body []byte) (requestID string, requestIDSet bool, in In, err error)
	// create runs the decoded input; replay answers a retry by the
	// fingerprint of its input alone, or says (ok false) that it cannot.
	create func(ctx context.Context, actor, requestID string, in In) (intentAnswer, error)
	replay func(ctx context.Context, actor, requestID, fp string) (a intentAnswer, ok bool, err error)
}

// intentAnswer is a created or replayed record, as serveIntent answers it.
type intentAnswer struct {
	record      any
	location    string
	replayed    bool
	fingerprint string // of the input; "" when the service gives none
}

// bodyKey names a body an actor sent to an intent operation.
type bodyKey struct {
	op, actor string
	sum       [sha256.Size]byte
}

// seenBody is what a body came to when it was answered: its request id,
// as the body has it, and the fingerprint of its input.
type seenBody struct {
	requestID    string
	requestIDSet bool
	fingerprint  string
}

// seenBodies bounds Server.bodies: at most this many bodies are
// remembered (a few hundred bytes each).
const seenBodies = 1 << 14

// serveIntent answers an intent POST (a generation, a publication) in the
// order the contract fixes: 415 (media type), 413 (size, while reading),
// 400 (body and request id), and only then create (409, 422); then 201
// with Location, or 200 with Idempotent-Replayed for a replay.
//
// A retry sends the same bytes again, so a body answered once is
// remembered (Server.bodies) with its request id and fingerprint, both
// functions of the bytes alone (and of the actor, for the fingerprint).
// The same bytes again skip the decode and the fingerprint: route.replay
// answers from the binding, when it is bound with that fingerprint. When
// it is not (an Idempotency-Key header naming an id not bound, or bound
// to other input), the request goes the whole way, which answers it as
// it would have without the memory.
func serveIntent[In any](s *Server, w http.ResponseWriter, r *http.Request, route intentRoute[In]) {
	if err := requireJSON(r); err != nil {
		s.Error(w, r, err)
		return
	}
	body, err := readBody(w, r, s.limits.GenerationBody)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	actor, _ := ActorFrom(r.Context())
	key := bodyKey{op: route.op, actor: actor, sum: sha256.Sum256(body)}
	if seen, ok := s.bodies.Get(key); ok {
		requestID, err := requestIDOf(r, seen.requestID, seen.requestIDSet)
		if err != nil {
			s.Error(w, r, err)
			return
		}
		noteRequestID(r.Context(), requestID)
		a, ok, err := route.replay(r.Context(), actor, requestID, seen.fingerprint)
		switch {
		case err != nil:
			s.Error(w, r, err)
			return
		case ok:
			s.answerIntent(w, r, a)
			return
		}
	}
	bodyID, bodySet, in, err := route.decode(body)
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
	a, err := route.create(r.Context(), actor, requestID, in)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if a.fingerprint != "" {
		s.bodies.Add(key, seenBody{requestID: bodyID, requestIDSet: bodySet, fingerprint: a.fingerprint})
	}
	s.answerIntent(w, r, a)
}

// answerIntent writes a created (201, Location) or replayed (200,
// Idempotent-Replayed) record.
func (s *Server) answerIntent(w http.ResponseWriter, r *http.Request, a intentAnswer) {
	if a.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		s.ok(w, r, http.StatusOK, a.record)
		return
	}
	w.Header().Set("Location", a.location)
	s.ok(w, r, http.StatusCreated, a.record)
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
	vals := r.Header.Values(idempotencyKeyHeader)
	var headerID string
	if len(vals) > 1 {
		return "", &intent.Error{Code: intent.EInvalid, Message: "The request ID is not valid.",
			Fields: []intent.FieldError{{Field: "Idempotency-Key", Message: "must appear at most once"}}}
	}
	if len(vals) == 1 {
		var err error
		if headerID, err = parseIdempotencyKey(vals[0]); err != nil {
			return "", err
		}
	}
	return intent.ResolveRequestID(bodyID, bodySet, headerID, len(vals) == 1)
}
