package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"studio/blob"
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
// If-Modified-Since and ranges. With a Presigner it answers a redirect to
// the object store instead (302, short-lived), unless ?redirect=false.
func (s *Server) getAssetContent(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFrom(r.Context())
	a, err := s.store.GetAsset(r.Context(), actor, chi.URLParam(r, "id"))
	if err != nil {
		s.Error(w, r, notFoundAs(err, "asset"))
		return
	}
	// The bytes of an asset never change; only its owner may read them.
	s.serveBlob(w, r, a, "private, max-age=31536000, immutable")
}

// serveBlob answers an asset's bytes from the blob store, with the quoted
// SHA-256 as ETag and cacheControl; http.ServeContent answers
// If-None-Match (304), If-Modified-Since and ranges. With a Presigner it
// answers a redirect to the object store instead (302, short-lived),
// unless ?redirect=false or the bytes are not where a URL reaches them.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, a intent.Asset, cacheControl string) {
	if s.blobs == nil {
		s.Error(w, r, intent.Errorf(intent.EUnavailable, "Asset content is not served by this process."))
		return
	}
	etag := `"` + a.SHA256 + `"`
	if s.presign != nil && r.URL.Query().Get("redirect") != "false" {
		if etagMatches(r.Header.Get("If-None-Match"), etag) {
			w.Header().Set("ETag", etag)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		u, err := s.presign.Presign(r.Context(), a.SHA256, s.presignTTL, a.ContentType)
		switch {
		case err == nil:
			h := w.Header()
			h.Set("ETag", etag)
			// The URL expires: nobody keeps the redirect.
			h.Set("Cache-Control", "private, no-store")
			http.Redirect(w, r, u.String(), http.StatusFound)
			return
		case !errors.Is(err, blob.ErrNotFound):
			s.Error(w, r, assetFault(a.ID, err))
			return
		}
		// Not where a URL reaches it (a sweep's trash): streamed below.
	}
	f, err := s.blobs.Open(r.Context(), a.SHA256)
	if err != nil {
		s.Error(w, r, assetFault(a.ID, err))
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", a.ContentType)
	h.Set("ETag", etag)
	h.Set("Cache-Control", cacheControl)
	http.ServeContent(w, r, "", a.CreatedAt, f)
}

// assetFault is the error of an asset whose row exists but whose bytes
// could not be read. The row exists, so its bytes must: a store that is
// down, or bytes that fail their SHA-256, are faults of the store (503);
// anything else is ours (%v, not %w: a not-found from the blob store is
// not a 404 here).
func assetFault(id string, err error) error {
	if errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrCorrupt) {
		return fmt.Errorf("open asset %s content: %w", id, err)
	}
	return fmt.Errorf("open asset %s content: %v", id, err)
}

// etagMatches says whether an If-None-Match header names etag (or is *).
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}
