package publish

import (
	"context"
	"errors"
	"fmt"

	"studio/store"
)

// StoreGallery is the gallery of studios whose asset bytes are shared (the
// PostgreSQL blobs table, an object store): it writes no file anywhere. A
// published file is a name (the publication's id, the asset's id and its
// extension) for bytes the asset store already holds under their SHA-256,
// and the publication's item is the row that binds the two. studio serves
// the gallery from the database and the asset store (GET
// /gallery/{publication id}/{file}), so any instance sharing them serves
// what any other published, and no instance needs a disk of its own.
//
// Publishing an item checks that the asset's bytes are in the store and
// whole (read and verified against their SHA-256), so a file the gallery
// serves never names bytes that are missing. Running it again checks
// again and changes nothing: idempotent by construction.
type StoreGallery struct {
	blobs BlobOpener
}

// NewStoreGallery is a gallery over blobs, where the assets' bytes are.
func NewStoreGallery(blobs BlobOpener) (*StoreGallery, error) {
	if blobs == nil {
		return nil, errors.New("new gallery: blobs are required")
	}
	return &StoreGallery{blobs: blobs}, nil
}

// Publish checks that the item's asset bytes are stored whole.
func (g *StoreGallery) Publish(ctx context.Context, it store.ClaimedItem) error {
	f, err := g.blobs.Open(ctx, it.Asset.SHA256)
	if err != nil {
		return fmt.Errorf("gallery: open asset %s: %w", it.Asset.ID, err)
	}
	return f.Close()
}
