package main

import (
	"context"
	"fmt"
	"path/filepath"

	"studio/blob"
	"studio/intent"
	"studio/leasequeue"
	"studio/publish"
)

// pubDeps are what uploads and publications are wired from.
type pubDeps struct {
	blobs    blob.Store
	uploads  *intent.Uploads
	channels map[string]publish.Channel
}

// buildPublications wires uploads (the blob store, a lock per client key)
// and the publication channels: the gallery, and the webhook when
// --webhook-url is set.
//
// Where the gallery keeps its files follows the asset store. With the
// files store (DATA/assets, SQLite's default) it also writes them to
// DATA/gallery, the static folder its docs promise to a web server on
// the same machine. With a store that instances share (the blobs table, an
// object store) it writes nothing: a published file is its item's row
// naming bytes already in the store, served by every instance at
// /gallery/, so instances share no disk. Both are served at /gallery/.
func (m *Main) buildPublications(d *deps) (*pubDeps, error) {
	p := &pubDeps{blobs: m.blobs, channels: map[string]publish.Channel{}}
	p.uploads = &intent.Uploads{
		Store:     m.store,
		Blobs:     blobWriter{m.blobs},
		Locker:    d.wrap.locker("upload"),
		Observe:   d.metrics.Intent,
		MaxPixels: m.Config.MaxUploadPixels,
	}
	var g publish.Channel
	var err error
	if _, onDisk := m.blobs.(*blob.FS); onDisk {
		g, err = publish.NewGallery(filepath.Join(m.Config.Data, "gallery"), m.blobs, m.store)
	} else {
		g, err = publish.NewStoreGallery(m.blobs)
	}
	if err != nil {
		return nil, err
	}
	p.channels[intent.ChannelGallery] = g
	if u := m.Config.WebhookURL; u != "" {
		w, err := publish.NewWebhook(u, nil, m.blobs)
		if err != nil {
			return nil, fmt.Errorf("--webhook-url: %w", err)
		}
		p.channels[intent.ChannelWebhook] = w
	}
	return p, nil
}

// channelNames are the channels carried out here, in a fixed order: what
// the intent service accepts.
func (p *pubDeps) channelNames() []string {
	var names []string
	for _, ch := range []string{intent.ChannelGallery, intent.ChannelWebhook} {
		if p.channels[ch] != nil {
			names = append(names, ch)
		}
	}
	return names
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
		Options: leasequeue.Options{
			Concurrency: cfg.Workers,
			LeaseTTL:    cfg.LeaseTTL,
			MaxAttempts: cfg.MaxAttempts,
			RetryBase:   cfg.RetryBase,
			Grace:       cfg.Grace,
			Wake:        m.engine.wake,
			Logger:      m.Logger.With("component", "publisher"),
		},
		Store:    m.store,
		Channels: d.pubs.channels,
	})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	m.onClose(func(ctx context.Context) error {
		r.Stop(ctx)
		return nil
	})
	m.Logger.Info("publisher started", "owner", r.Owner(), "concurrency", cfg.Workers, "channels", d.service.Channels)
	return nil
}
