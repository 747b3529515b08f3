package intent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"mime"
	"time"

	"golang.org/x/image/webp"
)

// OpUpload names uploads in Observe; it is not an intent operation (an
// upload's client key is not a request id and never meets one).
const OpUpload = "upload"

// MaxUploadBytes is the largest upload body: 20 MiB.
const MaxUploadBytes = 20 << 20

// DefaultMaxUploadPixels is the largest uploaded image by default, in
// pixels: 8192 x 8192. A header over it is refused before any decoding.
const DefaultMaxUploadPixels = 8192 * 8192

// Image types an upload may have.
const (
	TypePNG  = "image/png"
	TypeJPEG = "image/jpeg"
	TypeWebP = "image/webp"
)

// UploadBinding ties an actor's client key to the asset its first upload
// made and to the SHA-256 of those bytes.
type UploadBinding struct {
	Actor     string
	ClientKey string
	AssetID   string
	SHA256    string
	CreatedAt time.Time
}

// NewUpload is what one upload commits: the asset (an upload has no task)
// and, when ClientKey is not empty, the binding of the key to it.
type NewUpload struct {
	Asset     Asset
	ClientKey string
}

// UploadStore is what Uploads needs of persistence.
type UploadStore interface {
	// LookupUpload is the plain read of a client key's binding: ENotFound
	// when the actor never used the key.
	LookupUpload(ctx context.Context, actor, clientKey string) (UploadBinding, error)
	// CreateUpload inserts the asset and binds the client key (if any) in
	// one transaction, checking the binding again inside it. When the key
	// is already bound to the same SHA-256 it returns that asset and
	// created=false and writes nothing; to other bytes, an EConflict error.
	CreateUpload(ctx context.Context, in NewUpload) (a Asset, created bool, err error)
	// GetAsset reads one of the actor's assets.
	GetAsset(ctx context.Context, actor, id string) (Asset, error)
}

// BlobWriter stores bytes by their SHA-256 (lowercase hex) and answers it:
// the file is whole and durable when Put returns, so a row may name it.
type BlobWriter interface {
	Put(ctx context.Context, r io.Reader) (sha256 string, size int64, err error)
}

// Uploads stores uploaded images, optionally under a client key.
//
// A file cannot join a database transaction, so a keyed upload runs under
// a lock on (actor, client key): look the key up (a bound key answers its
// asset, or a conflict when the bytes differ); otherwise write the bytes
// (content addressed: files first), then insert the asset and bind the key
// in one transaction that checks the binding again. A crash between the
// file and the row leaves an unnamed file, never a row without bytes.
type Uploads struct {
	Store  UploadStore
	Blobs  BlobWriter
	Locker Locker
	// Now is the clock for record times; time.Now by default.
	Now func() time.Time
	// MaxPixels is the largest image accepted, width x height;
	// DefaultMaxUploadPixels when 0.
	MaxPixels int64
	// Observe, when set, is told the outcome of every upload (operation
	// OpUpload): created, replayed, conflict, invalid or error.
	Observe func(operation string, outcome Outcome)
}

// UploadRequest is one upload: the bytes, already spooled, with the type
// the client declared and the client key (empty: none).
type UploadRequest struct {
	Actor       string
	ClientKey   string
	ContentType string
	Body        UploadBody
}

// UploadBody is an upload's bytes as the caller read them (httpapi spools
// them to a file while hashing): their hash and length, and a way to read
// them again from the start, as often as needed.
type UploadBody struct {
	// SHA256 is the lowercase hex SHA-256 of the bytes.
	SHA256 string
	// Size is their length.
	Size int64
	// Open returns a new reader of the bytes, from the start.
	Open func() io.ReadSeeker
}

// UploadResult is the answer to an upload.
type UploadResult struct {
	Asset Asset
	// Replayed is true when the client key was already bound to these
	// bytes: nothing was written, and Asset is the one made then.
	Replayed bool
}

// Upload checks the bytes are the image they claim to be (EUnsupportedMedia
// otherwise) and stores them.
func (u *Uploads) Upload(ctx context.Context, req UploadRequest) (res UploadResult, err error) {
	defer func() { observeOutcome(u.Observe, OpUpload, res.Replayed, err) }()
	if req.Body.Open == nil {
		return res, errors.New("upload: no body")
	}
	maxPixels := u.MaxPixels
	if maxPixels <= 0 {
		maxPixels = DefaultMaxUploadPixels
	}
	img, err := CheckImage(ctx, req.ContentType, req.Body.Open(), maxPixels)
	if err != nil {
		return res, err
	}
	if req.ClientKey == "" {
		a, _, err := u.store(ctx, req, img)
		return UploadResult{Asset: a}, err
	}
	if err := ValidateRequestID(req.ClientKey); err != nil {
		return res, err
	}
	err = u.Locker.Hold(ctx, uploadLockKey(req.Actor, req.ClientKey), func(ctx context.Context) error {
		// The early check: a bound key needs no write.
		found, err := u.Store.LookupUpload(ctx, req.Actor, req.ClientKey)
		switch {
		case err == nil:
			if found.SHA256 != req.Body.SHA256 {
				return &Error{Code: EConflict, Message: ConflictMessage}
			}
			a, err := u.Store.GetAsset(ctx, req.Actor, found.AssetID)
			if err != nil {
				return fmt.Errorf("read uploaded asset: %w", err)
			}
			res = UploadResult{Asset: a, Replayed: true}
			return nil
		case ErrorCode(err) != ENotFound:
			return fmt.Errorf("look up client key: %w", err)
		}
		a, created, err := u.store(ctx, req, img)
		if err != nil {
			return err
		}
		res = UploadResult{Asset: a, Replayed: !created}
		return nil
	})
	if err != nil {
		return UploadResult{}, err
	}
	return res, nil
}

// store writes the bytes, then the row.
func (u *Uploads) store(ctx context.Context, req UploadRequest, img ImageInfo) (Asset, bool, error) {
	sha, size, err := u.Blobs.Put(ctx, req.Body.Open())
	if err != nil {
		return Asset{}, false, fmt.Errorf("store upload bytes: %w", err)
	}
	if sha != req.Body.SHA256 || size != req.Body.Size {
		return Asset{}, false, fmt.Errorf("store upload bytes: stored %s (%d bytes), read %s (%d bytes)", sha, size, req.Body.SHA256, req.Body.Size)
	}
	id, err := newID()
	if err != nil {
		return Asset{}, false, err
	}
	now := time.Now
	if u.Now != nil {
		now = u.Now
	}
	a := Asset{ID: id, Actor: req.Actor, SHA256: sha, ContentType: img.ContentType, Size: size,
		Width: img.Width, Height: img.Height, CreatedAt: now().UTC()}
	got, created, err := u.Store.CreateUpload(ctx, NewUpload{Asset: a, ClientKey: req.ClientKey})
	if err != nil {
		return Asset{}, false, err
	}
	return got, created, nil
}

// observeOutcome tells fn (when set) the outcome of one operation.
func observeOutcome(fn func(operation string, outcome Outcome), op string, replayed bool, err error) {
	if fn == nil {
		return
	}
	switch code := ErrorCode(err); {
	case err == nil && replayed:
		fn(op, OutcomeReplayed)
	case err == nil:
		fn(op, OutcomeCreated)
	case code == EConflict:
		fn(op, OutcomeConflict)
	case code == EInvalid || code == EUnprocessable || code == ETooLarge || code == EUnsupportedMedia:
		fn(op, OutcomeInvalid)
	case errors.Is(err, context.Canceled):
	default:
		fn(op, OutcomeError)
	}
}

// uploadLockKey is the upload lock's key, apart from the intent lock's.
func uploadLockKey(actor, clientKey string) string {
	return "upload\x00" + actor + "\x00" + clientKey
}

// ImageInfo is what an image's header says.
type ImageInfo struct {
	ContentType string
	Width       int
	Height      int
}

// InspectImage checks that r holds an image of the declared type (a media
// type, parameters allowed: PNG, JPEG or WebP), by its signature and its
// header, and reads its size. Any mismatch is EUnsupportedMedia.
func InspectImage(declared string, r io.Reader) (ImageInfo, error) {
	if declared == "" {
		return ImageInfo{}, Errorf(EUnsupportedMedia, "The body must be image/png, image/jpeg or image/webp; the request has no Content-Type.")
	}
	mt, _, err := mime.ParseMediaType(declared)
	if err != nil || (mt != TypePNG && mt != TypeJPEG && mt != TypeWebP) {
		return ImageInfo{}, Errorf(EUnsupportedMedia, "The body must be image/png, image/jpeg or image/webp.")
	}
	var head [16]byte
	n, err := io.ReadFull(r, head[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return ImageInfo{}, fmt.Errorf("read image: %w", err)
	}
	sniffed := SniffImage(head[:n])
	if sniffed != mt {
		if sniffed == "" {
			return ImageInfo{}, Errorf(EUnsupportedMedia, "The body is not a PNG, JPEG or WebP image.")
		}
		return ImageInfo{}, Errorf(EUnsupportedMedia, "The body is %s, not the %s its Content-Type says.", sniffed, mt)
	}
	decode := map[string]func(io.Reader) (image.Config, error){
		TypePNG: png.DecodeConfig, TypeJPEG: jpeg.DecodeConfig, TypeWebP: webp.DecodeConfig,
	}[mt]
	cfg, err := decode(io.MultiReader(bytes.NewReader(head[:n]), r))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return ImageInfo{}, Errorf(EUnsupportedMedia, "The body is not a valid %s image.", mt)
	}
	return ImageInfo{ContentType: mt, Width: cfg.Width, Height: cfg.Height}, nil
}

// decodeGate bounds the full decodes running at once in the process: one
// decode of the largest image allowed holds width x height x up to 8
// bytes, so they take turns.
var decodeGate = make(chan struct{}, 1)

// CheckImage is InspectImage, then two checks of what the header claims:
// an image of more than maxPixels pixels is ETooLarge (before any decoding),
// and one whose data does not decode whole is EUnsupportedMedia.
func CheckImage(ctx context.Context, declared string, r io.ReadSeeker, maxPixels int64) (ImageInfo, error) {
	img, err := InspectImage(declared, r)
	if err != nil {
		return img, err
	}
	if px := int64(img.Width) * int64(img.Height); px > maxPixels {
		return ImageInfo{}, Errorf(ETooLarge, "The image is %dx%d pixels, over the limit of %d pixels.", img.Width, img.Height, maxPixels)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return ImageInfo{}, fmt.Errorf("read image: %w", err)
	}
	select {
	case decodeGate <- struct{}{}:
	case <-ctx.Done():
		return ImageInfo{}, ctx.Err()
	}
	defer func() { <-decodeGate }()
	decode := map[string]func(io.Reader) (image.Image, error){
		TypePNG: png.Decode, TypeJPEG: jpeg.Decode, TypeWebP: webp.Decode,
	}[img.ContentType]
	if _, err := decode(r); err != nil {
		return ImageInfo{}, Errorf(EUnsupportedMedia, "The body is not a valid %s image: its data does not decode.", img.ContentType)
	}
	return img, nil
}

// SniffImage names the image type of the first bytes of a body by their
// signature, or "" when they are none of PNG, JPEG and WebP.
func SniffImage(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x89PNG\r\n\x1a\n")):
		return TypePNG
	case bytes.HasPrefix(head, []byte("\xff\xd8\xff")):
		return TypeJPEG
	case len(head) >= 16 && string(head[:4]) == "RIFF" && string(head[8:15]) == "WEBPVP8":
		return TypeWebP
	}
	return ""
}
