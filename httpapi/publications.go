package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"studio/intent"
	"studio/store"
)

// Publications creates and reads publications: intent.Service implements
// it.
type Publications interface {
	CreatePublication(ctx context.Context, actor, requestID string, in intent.PublicationInput) (intent.PublicationResult, error)
	ReplayPublication(ctx context.Context, actor, requestID, fingerprint string) (res intent.PublicationResult, ok bool, err error)
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
	serveIntent(s, w, r, intentRoute[intent.PublicationInput]{
		op:     intent.OpPublication,
		decode: intent.DecodePublication,
		create: func(ctx context.Context, actor, requestID string, in intent.PublicationInput) (intentAnswer, error) {
			res, err := s.pubs.CreatePublication(ctx, actor, requestID, in)
			return publicationAnswer(res), err
		},
		replay: func(ctx context.Context, actor, requestID, fp string) (intentAnswer, bool, error) {
			res, ok, err := s.pubs.ReplayPublication(ctx, actor, requestID, fp)
			return publicationAnswer(res), ok, err
		},
	})
}

func publicationAnswer(res intent.PublicationResult) intentAnswer {
	return intentAnswer{record: res.Publication, location: "/v1/publications/" + url.PathEscape(res.Publication.ID),
		replayed: res.Replayed, fingerprint: res.Fingerprint}
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

// listPublications is GET /v1/publications: the actor's publications,
// newest first, in cursor pages like the batches list.
func (s *Server) listPublications(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	const scope = "publications"
	pg, err := s.parsePage(q, scope)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	actor, _ := ActorFrom(r.Context())
	items, err := s.store.ListPublications(r.Context(), store.ListParams{Actor: actor, Limit: pg.limit + 1, After: pg.after})
	if err != nil {
		s.Error(w, r, err)
		return
	}
	s.ok(w, r, http.StatusOK, makePage(s.cursors, items, pg.limit, scope, func(p intent.Publication) string { return p.ID }))
}
