package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"studio/intent"
	"studio/publish"
	"studio/store"
)

// galleryCache is the Cache-Control of a gallery file: public (a gallery
// is what is published), for an hour. A file's bytes never change, but its
// publication may be deleted (by a batch's deletion or retention), and an
// hour bounds how long shared caches serve it after that.
const galleryCache = "public, max-age=3600"

// getGalleryFile is GET /gallery/{publication}/{file}, with no token: the
// gallery as its folder on disk has it, served from the database and the
// asset store, so that every instance sharing them serves every
// publication whoever carried it out. {file} is manifest.json (every item
// of the publication, once one of them is published) or an item's file,
// <asset id>.png (.jpg, .webp), once that item succeeded. Anything else,
// including another channel's publication, is 404.
func (s *Server) getGalleryFile(w http.ResponseWriter, r *http.Request) {
	pubID, file := chi.URLParam(r, "publication"), chi.URLParam(r, "file")
	notFound := intent.Errorf(intent.ENotFound, "No gallery file %s/%s.", truncate(pubID, 100), truncate(file, 100))
	if file == publish.ManifestName {
		s.serveManifest(w, r, pubID, notFound)
		return
	}
	assetID, _, ok := strings.Cut(file, ".")
	if !ok {
		s.Error(w, r, notFound)
		return
	}
	it, err := s.store.PublicationItem(r.Context(), pubID, assetID)
	if err != nil {
		if intent.ErrorCode(err) == intent.ENotFound {
			err = notFound
		}
		s.Error(w, r, err)
		return
	}
	if !published(it) || publish.FileName(it.Asset.ID, it.Asset.ContentType) != file {
		s.Error(w, r, notFound)
		return
	}
	s.serveBlob(w, r, it.Asset, galleryCache)
}

// serveManifest answers a publication's manifest.json: the bytes the
// gallery on disk writes, made from the database at each request.
func (s *Server) serveManifest(w http.ResponseWriter, r *http.Request, pubID string, notFound error) {
	items, err := s.store.PublicationItems(r.Context(), pubID)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if !anyPublished(items) {
		s.Error(w, r, notFound)
		return
	}
	body, err := publish.NewManifest(pubID, items).Encode()
	if err != nil {
		s.Error(w, r, err)
		return
	}
	sum := sha256.Sum256(body)
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
	h.Set("Cache-Control", galleryCache)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// published says whether an item is a published gallery file.
func published(it store.PublicationItem) bool {
	return it.Channel == intent.ChannelGallery && it.State == intent.StateSucceeded
}

// anyPublished says whether a gallery publication has a published file
// (its manifest exists from then on, as on disk).
func anyPublished(items []store.PublicationItem) bool {
	for _, it := range items {
		if published(it) {
			return true
		}
	}
	return false
}
