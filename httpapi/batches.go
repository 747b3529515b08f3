package httpapi

import (
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"

	"studio/intent"
	"studio/store"
)

// taskStates are the values the tasks list's state filter accepts.
var taskStates = []intent.State{intent.StateQueued, intent.StateRunning, intent.StateSucceeded, intent.StateFailed, intent.StateCanceled}

// getBatch is GET /v1/batches/{id}.
func (s *Server) getBatch(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFrom(r.Context())
	b, err := s.store.GetBatch(r.Context(), actor, chi.URLParam(r, "id"))
	if err != nil {
		s.Error(w, r, notFoundAs(err, "batch"))
		return
	}
	s.ok(w, r, http.StatusOK, b)
}

// listBatches is GET /v1/batches: the actor's batches, newest first.
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	const scope = "batches"
	pg, err := s.parsePage(q, scope)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	actor, _ := ActorFrom(r.Context())
	items, err := s.store.ListBatches(r.Context(), store.ListParams{Actor: actor, Limit: pg.limit + 1, After: pg.after})
	if err != nil {
		s.Error(w, r, err)
		return
	}
	s.ok(w, r, http.StatusOK, makePage(s.cursors, items, pg.limit, scope, func(b intent.Batch) string { return b.ID }))
}

// listTasks is GET /v1/batches/{id}/tasks: a batch's tasks in plan order,
// optionally only those in one state.
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	batchID := chi.URLParam(r, "id")
	state, err := single(q, "state")
	if err == nil && q.Has("state") && !slices.Contains(taskStates, intent.State(state)) {
		err = invalidQuery("state", "must be one of queued, running, succeeded, failed, canceled")
	}
	if err != nil {
		s.Error(w, r, err)
		return
	}
	// The cursor belongs to this batch and this filter.
	scope := "tasks:" + batchID + ":" + state
	pg, err := s.parsePage(q, scope)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	actor, _ := ActorFrom(r.Context())
	items, err := s.store.ListTasks(r.Context(), batchID, store.ListParams{Actor: actor, Limit: pg.limit + 1, After: pg.after, State: intent.State(state)})
	if err != nil {
		s.Error(w, r, notFoundAs(err, "batch"))
		return
	}
	s.ok(w, r, http.StatusOK, makePage(s.cursors, items, pg.limit, scope, func(t intent.Task) string { return t.ID }))
}

// deleteBatch deletes an ended batch: 204, or 404 when there is none
// (deleted already included), or 409 while it runs.
func (s *Server) deleteBatch(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFrom(r.Context())
	if _, err := s.store.DeleteBatch(r.Context(), actor, chi.URLParam(r, "id")); err != nil {
		s.Error(w, r, notFoundAs(err, "batch"))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// cancelBatch is POST /v1/batches/{id}/cancel: idempotent; answers the
// batch as it stands after.
func (s *Server) cancelBatch(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFrom(r.Context())
	b, err := s.store.CancelBatch(r.Context(), actor, chi.URLParam(r, "id"))
	if err != nil {
		s.Error(w, r, notFoundAs(err, "batch"))
		return
	}
	s.ok(w, r, http.StatusOK, b)
}
