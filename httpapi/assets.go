package httpapi

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"studio/intent"
)

// getAsset is GET /v1/assets/{id}: the asset's record.
func (s *Server) getAsset(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFrom(r.Context())
	a, err := s.store.GetAsset(r.Context(), actor, chi.URLParam(r, "id"))
	if err != nil {
		s.Error(w, r, notFoundAs(err, "asset"))
		return
	}
	s.ok(w, r, http.StatusOK, a)
}

// getAssetContent is GET /v1/assets/{id}/content: the bytes, with the
// quoted SHA-256 as ETag. http.ServeContent answers If-None-Match (304),
// If-Modified-Since and ranges.
func (s *Server) getAssetContent(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFrom(r.Context())
	a, err := s.store.GetAsset(r.Context(), actor, chi.URLParam(r, "id"))
	if err != nil {
		s.Error(w, r, notFoundAs(err, "asset"))
		return
	}
	if s.blobs == nil {
		s.Error(w, r, intent.Errorf(intent.EUnavailable, "Asset content is not served by this process."))
		return
	}
	f, err := s.blobs.Open(r.Context(), a.SHA256)
	if err != nil {
		// The row exists, so its bytes must: whatever went wrong is ours
		// (%v, not %w: a not-found from the blob store is not a 404 here).
		s.Error(w, r, fmt.Errorf("open asset %s content: %v", a.ID, err))
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", a.ContentType)
	h.Set("ETag", `"`+a.SHA256+`"`)
	// The bytes of an asset never change; only its owner may read them.
	h.Set("Cache-Control", "private, max-age=31536000, immutable")
	http.ServeContent(w, r, "", a.CreatedAt, f)
}
