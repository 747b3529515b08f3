package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"studio/blob"
	"studio/intent"
	"studio/publish"
	"studio/store/postgres"
)

// pubDeps are what uploads and publications are wired from.
type pubDeps struct {
	blobs    blob.Store
	uploads  *intent.Uploads
	channels map[string]publish.Channel
}

// buildPublications wires uploads (the blob store, a lock per client key)
// and the publication channels: the gallery in DATA/gallery, and the
// webhook when --webhook-url is set. It tells the intent service which
// channels are carried out here.
func (m *Main) buildPublications(d *deps) (*pubDeps, error) {
	b, err := m.assetBlobs()
	if err != nil {
		return nil, err
	}
	p := &pubDeps{blobs: b, channels: map[string]publish.Channel{}}
	p.uploads = &intent.Uploads{
		Store:     m.store,
		Blobs:     blobWriter{b},
		Locker:    d.metrics.Locker("upload", engineLocker{d.locks}),
		Observe:   d.metrics.Intent,
		MaxPixels: m.Config.MaxUploadPixels,
	}
	g, err := publish.NewGallery(filepath.Join(m.Config.Data, "gallery"), b, m.store)
	if err != nil {
		return nil, err
	}
	p.channels[intent.ChannelGallery] = g
	if u := m.Config.WebhookURL; u != "" {
		w, err := publish.NewWebhook(u, nil, b)
		if err != nil {
			return nil, fmt.Errorf("--webhook-url: %w", err)
		}
		p.channels[intent.ChannelWebhook] = w
	}
	d.service.Publications = m.store
	d.service.Channels = nil
	for _, ch := range []string{intent.ChannelGallery, intent.ChannelWebhook} {
		if p.channels[ch] != nil {
			d.service.Channels = append(d.service.Channels, ch)
		}
	}
	return p, nil
}

// assetBlobs is the store of asset bytes: the one this process already
// has, the database on PostgreSQL (processes there share no disk), or files
// under DATA/assets.
func (m *Main) assetBlobs() (blob.Store, error) {
	if b, ok := m.blobs.(blob.Store); ok {
		return b, nil
	}
	if s, ok := m.store.(*postgres.Store); ok {
		b := postgres.NewBlobStore(s)
		m.blobs = b
		return b, nil
	}
	fs, err := blob.NewFS(filepath.Join(m.Config.Data, "assets"))
	if err != nil {
		return nil, fmt.Errorf("open asset store: %w", err)
	}
	if m.blobs == nil {
		m.blobs = fs
	}
	return fs, nil
}

// startPublisher starts the runner that carries out publication items
// (with as many items at once as --workers; none when it is 0), and stops
// it on Close, before the store closes.
func (m *Main) startPublisher(ctx context.Context, d *deps) error {
	if m.Config.Workers == 0 || d.pubs == nil {
		return nil
	}
	cfg := m.Config
	r, err := publish.New(publish.Config{
		Store:       m.store,
		Channels:    d.pubs.channels,
		Concurrency: cfg.Workers,
		LeaseTTL:    cfg.LeaseTTL,
		MaxAttempts: cfg.MaxAttempts,
		RetryBase:   cfg.RetryBase,
		Grace:       cfg.Grace,
		Logger:      m.Logger.With("component", "publisher"),
	})
	if err != nil {
		return err
	}
	r.Start(ctx)
	m.onClose(func(ctx context.Context) error {
		r.Stop(ctx)
		return nil
	})
	m.Logger.Info("publisher started", "owner", r.Owner(), "concurrency", cfg.Workers, "channels", d.service.Channels)
	return nil
}

// blobWriter adapts the blob store to the Uploads port.
type blobWriter struct{ b blob.Store }

func (w blobWriter) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	info, err := w.b.Put(ctx, r)
	return info.SHA256, info.Size, err
}
