package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"

	"studio/intent"
)

// Uploads stores uploaded images: intent.Uploads implements it.
type Uploads interface {
	Upload(ctx context.Context, req intent.UploadRequest) (intent.UploadResult, error)
}

// createUpload is POST /v1/uploads: the raw image as the body. Its checks
// run in this order: 413 (the declared length, then while reading: the
// body streams to a temporary file, hashed on the way, never whole in
// memory), 400 (the Idempotency-Key header), 415 (the Content-Type, and
// the bytes against it), then the client key (200 replay, 409) or 201.
func (s *Server) createUpload(w http.ResponseWriter, r *http.Request) {
	if s.uploads == nil {
		s.Error(w, r, intent.Errorf(intent.EUnavailable, "Uploads are not served by this process."))
		return
	}
	limit := s.limits.UploadBody
	if r.ContentLength > limit {
		s.Error(w, r, intent.Errorf(intent.ETooLarge, "The body is over its limit of %d bytes.", limit))
		return
	}
	spool, err := spoolBody(&uploadBody{r: http.MaxBytesReader(w, r.Body, limit), limit: limit}, s.uploadDir, limit)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	defer spool.Close()
	key, err := clientKeyOf(r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if key != "" {
		noteRequestID(r.Context(), key)
	}
	actor, _ := ActorFrom(r.Context())
	res, err := s.uploads.Upload(r.Context(), intent.UploadRequest{
		Actor: actor, ClientKey: key, ContentType: r.Header.Get("Content-Type"), Body: spool.Body(),
	})
	if err != nil {
		s.Error(w, r, err)
		return
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		s.ok(w, r, http.StatusOK, res.Asset)
		return
	}
	w.Header().Set("Location", "/v1/assets/"+url.PathEscape(res.Asset.ID))
	s.ok(w, r, http.StatusCreated, res.Asset)
}

// clientKeyOf reads the optional Idempotency-Key of an upload, parsed as a
// generation's: quoted or bare, at most once.
func clientKeyOf(r *http.Request) (string, error) {
	vals := r.Header.Values(idempotencyKeyHeader)
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
		return parseIdempotencyKey(vals[0])
	}
	return "", &intent.Error{Code: intent.EInvalid, Message: "The request ID is not valid.",
		Fields: []intent.FieldError{{Field: idempotencyKeyHeader, Message: "must appear at most once"}}}
}

// uploadBody turns the body's read errors into domain errors: past the
// limit is 413, anything else (the client went away) 400.
type uploadBody struct {
	r     io.Reader
	limit int64
}

func (b *uploadBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	switch {
	case err == nil || err == io.EOF:
		return n, err
	case errors.As(err, new(*http.MaxBytesError)):
		return n, intent.Errorf(intent.ETooLarge, "The body is over its limit of %d bytes.", b.limit)
	case errors.As(err, new(*intent.Error)):
		return n, err // the body's deadline passed (408)
	}
	return n, intent.Errorf(intent.EInvalid, "The body could not be read.")
}
