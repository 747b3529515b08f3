package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"studio/store"
)

// ManifestName is the gallery's index of a publication.
const ManifestName = "manifest.json"

// galleryTmp is where the gallery writes files before renaming them into
// place: inside its directory (one filesystem, so the rename is atomic),
// outside every publication's.
const galleryTmp = ".tmp"

// ItemLister lists a publication's items: store.PublicationStore has it.
type ItemLister interface {
	PublicationItems(ctx context.Context, publicationID string) ([]store.PublicationItem, error)
}

// Gallery is the embedded channel: it writes each published asset, and a
// manifest.json describing every item of the publication, under
// DIR/<publication id>/. Every write goes to a temporary file, is synced,
// and is renamed to its fixed name, so a retry of an item rewrites the same
// file (never a second one), a reader never sees half a file, and two
// runs of one item at once (a lost lease and its successor) both leave the
// whole file.
type Gallery struct {
	dir   string
	blobs BlobOpener
	items ItemLister
}

// NewGallery opens (creating if needed) a gallery in dir, reading asset
// bytes from blobs and items from items. It removes temporary files an
// interrupted write left more than an hour ago.
func NewGallery(dir string, blobs BlobOpener, items ItemLister) (*Gallery, error) {
	if dir == "" || blobs == nil || items == nil {
		return nil, errors.New("new gallery: a directory, blobs and items are required")
	}
	tmp := filepath.Join(dir, galleryTmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("new gallery: %w", err)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil, fmt.Errorf("new gallery: %w", err)
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
			os.Remove(filepath.Join(tmp, e.Name()))
		}
	}
	return &Gallery{dir: dir, blobs: blobs, items: items}, nil
}

// Dir is the gallery's directory.
func (g *Gallery) Dir() string { return g.dir }

// FileName is the name of an asset's file in the gallery.
func FileName(assetID, contentType string) string {
	ext := ".bin"
	switch contentType {
	case "image/png":
		ext = ".png"
	case "image/jpeg":
		ext = ".jpg"
	case "image/webp":
		ext = ".webp"
	}
	return assetID + ext
}

// Publish writes the item's asset and the publication's manifest.
func (g *Gallery) Publish(ctx context.Context, it store.ClaimedItem) error {
	if strings.ContainsAny(it.PublicationID, `/\.`) || strings.ContainsAny(it.Asset.ID, `/\.`) || it.PublicationID == "" || it.Asset.ID == "" {
		return Permanent(fmt.Errorf("gallery: unsafe ids %q, %q", it.PublicationID, it.Asset.ID))
	}
	dir := filepath.Join(g.dir, it.PublicationID)
	if err := g.mkdir(dir); err != nil {
		return err
	}
	f, err := g.blobs.Open(ctx, it.Asset.SHA256)
	if err != nil {
		return fmt.Errorf("gallery: open asset %s: %w", it.Asset.ID, err)
	}
	defer f.Close()
	if err := g.write(ctx, dir, FileName(it.Asset.ID, it.Asset.ContentType), f); err != nil {
		return err
	}
	return g.writeManifest(ctx, dir, it.PublicationID)
}

// ManifestEntry describes one published item in manifest.json.
type ManifestEntry struct {
	// ID is the asset's id.
	ID          string `json:"id"`
	ItemID      string `json:"item_id"`
	File        string `json:"file"`
	Prompt      string `json:"prompt"`
	Collection  string `json:"collection"`
	Frame       string `json:"frame"`
	Generator   string `json:"generator"`
	Candidate   int    `json:"candidate"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
}

// Manifest is the content of manifest.json: every item of the
// publication, in the order of its asset ids, whatever state each is in.
// It depends only on the publication, so every item writes the same bytes.
type Manifest struct {
	PublicationID string          `json:"publication_id"`
	Items         []ManifestEntry `json:"items"`
}

// NewManifest is the manifest of a publication with these items (every
// one, in asset order, as ItemLister answers them).
func NewManifest(publicationID string, items []store.PublicationItem) Manifest {
	m := Manifest{PublicationID: publicationID, Items: make([]ManifestEntry, len(items))}
	for i, it := range items {
		m.Items[i] = ManifestEntry{ID: it.Asset.ID, ItemID: it.ID, File: FileName(it.Asset.ID, it.Asset.ContentType),
			Prompt: it.Prompt, Collection: it.Collection, Frame: it.Frame, Generator: it.Generator, Candidate: it.Candidate,
			SHA256: it.Asset.SHA256, ContentType: it.Asset.ContentType, Width: it.Asset.Width, Height: it.Asset.Height}
	}
	return m
}

// Encode answers manifest.json's bytes: indented, deterministic, ending in
// a newline, so the same publication always makes the same bytes.
func (m Manifest) Encode() ([]byte, error) {
	body, err := json.Marshal(m, json.Deterministic(true), jsontext.WithIndent("  "))
	if err != nil {
		return nil, fmt.Errorf("gallery: encode manifest: %w", err)
	}
	return append(body, '\n'), nil
}

// writeManifest writes the publication's manifest unless the file holds
// those bytes already.
func (g *Gallery) writeManifest(ctx context.Context, dir, publicationID string) error {
	items, err := g.items.PublicationItems(ctx, publicationID)
	if err != nil {
		return fmt.Errorf("gallery: list items: %w", err)
	}
	body, err := NewManifest(publicationID, items).Encode()
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(filepath.Join(dir, ManifestName)); err == nil && bytes.Equal(old, body) {
		return nil
	}
	return g.write(ctx, dir, ManifestName, bytes.NewReader(body))
}

// write puts r's bytes at dir/name: a temporary file, fsync, rename over
// the fixed name, fsync of the directory.
func (g *Gallery) write(ctx context.Context, dir, name string, r io.Reader) error {
	tmp, err := os.CreateTemp(filepath.Join(g.dir, galleryTmp), "write-*")
	if err != nil {
		return fmt.Errorf("gallery: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, r); err != nil {
		return fmt.Errorf("gallery: write %s: %w", name, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("gallery: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("gallery: fsync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("gallery: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gallery: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("gallery: %w", err)
	}
	done = true
	return syncDir(dir)
}

// mkdir creates a publication's directory and makes its entry durable.
func (g *Gallery) mkdir(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("gallery: %w", err)
	}
	return syncDir(g.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("gallery: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("gallery: fsync %s: %w", dir, err)
	}
	return nil
}
