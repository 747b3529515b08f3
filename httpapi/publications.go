package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"studio/intent"
)

// Publications creates and reads publications: intent.Service implements
// it.
type Publications interface {
	CreatePublication(ctx context.Context, actor, requestID string, in intent.PublicationInput) (intent.PublicationResult, error)
	GetPublication(ctx context.Context, actor, id string) (intent.Publication, error)
}

// createPublication is POST /v1/publications, with the checks of a
// generation in the same order: 415, 413, 400, then the service (409,
// 422, 201, 200).
func (s *Server) createPublication(w http.ResponseWriter, r *http.Request) {
	if s.pubs == nil {
		s.Error(w, r, intent.Errorf(intent.EUnavailable, "Publications are not served by this process."))
		return
	}
	if err := requireJSON(r); err != nil {
		s.Error(w, r, err)
		return
	}
	body, err := readBody(w, r, s.limits.GenerationBody)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	bodyID, bodySet, in, err := intent.DecodePublication(body)
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
	res, err := s.pubs.CreatePublication(r.Context(), actor, requestID, in)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		s.ok(w, r, http.StatusOK, res.Publication)
		return
	}
	w.Header().Set("Location", "/v1/publications/"+url.PathEscape(res.Publication.ID))
	s.ok(w, r, http.StatusCreated, res.Publication)
}

// getPublication is GET /v1/publications/{id}.
func (s *Server) getPublication(w http.ResponseWriter, r *http.Request) {
	if s.pubs == nil {
		s.Error(w, r, intent.Errorf(intent.EUnavailable, "Publications are not served by this process."))
		return
	}
	actor, _ := ActorFrom(r.Context())
	p, err := s.pubs.GetPublication(r.Context(), actor, chi.URLParam(r, "id"))
	if err != nil {
		s.Error(w, r, notFoundAs(err, "publication"))
		return
	}
	s.ok(w, r, http.StatusOK, p)
}
