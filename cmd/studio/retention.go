package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"studio/blob"
	"studio/httpapi"
	"studio/intent"
	"studio/store"
	"studio/store/sqlite"
	"studio/worker"
)

// Running it for a long time: tokens that can be listed and revoked,
// deletion and retention (prune), disk space back (vacuum), backup.

// age is a duration that also takes days ("30d", "1d12h"): the unit
// retention and token expiry speak in.
type age time.Duration

// parseAge reads "30d", "12h", "1d12h", "90m" or "0".
func parseAge(s string) (time.Duration, error) {
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("age %q: want a number of days before d, as in 30d", s)
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("age %q: want a duration such as 30d, 12h or 1d12h", s)
	}
	return days + d, nil
}

func (a *age) String() string {
	d := time.Duration(*a)
	if d != 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func (a *age) Set(s string) error {
	d, err := parseAge(s)
	*a = age(d)
	return err
}

// retentionEvery is how often serve --retain prunes: a 24th of the window,
// between a minute and an hour.
func retentionEvery(retain time.Duration) time.Duration {
	return min(max(retain/24, time.Minute), time.Hour)
}

// pruneReport is what one prune pass did.
type pruneReport struct {
	store.Deleted
	// Blobs counts the files of bytes no asset names any more, removed.
	Blobs int
	// Reclaimed is what the database file gave back to the filesystem.
	Reclaimed int64
}

// prunePass deletes the ended batches older than before, one transaction
// each, then the bytes no asset names that are older than sweepAge, then
// gives the freed pages of a SQLite file back (reclaim, nil on PostgreSQL).
func prunePass(ctx context.Context, s store.Store, blobs blob.Store, reclaim func(context.Context) (int64, error),
	before time.Time, dryRun bool, sweepAge time.Duration) (pruneReport, error) {
	var r pruneReport
	d, err := store.Prune(ctx, s, store.PruneParams{Before: before, DryRun: dryRun})
	r.Deleted = d
	if err != nil || dryRun {
		return r, err
	}
	if blobs != nil {
		sw, err := blobs.Sweep(ctx, blob.SweepParams{OlderThan: sweepAge, InUse: s.BlobInUse})
		if err != nil {
			return r, err
		}
		r.Blobs = sw.Removed
	}
	if reclaim != nil {
		if r.Reclaimed, err = reclaim(ctx); err != nil {
			return r, err
		}
	}
	return r, nil
}

// startRetention prunes, with --retain, the ended batches older than the
// window: once at start, then every retentionEvery, until Close.
func (m *Main) startRetention() {
	retain := time.Duration(m.Config.Retain)
	if retain <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(retentionEvery(retain))
		defer t.Stop()
		for {
			r, err := prunePass(ctx, m.store, m.blobs, m.engine.reclaim, time.Now().Add(-retain), false, worker.DefaultSweepAge)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				m.Logger.Error("prune failed", "err", err)
			case r.Batches > 0 || r.Blobs > 0:
				m.Logger.Info("pruned", "batches", r.Batches, "tasks", r.Tasks, "assets", r.Assets,
					"asset_bytes", r.AssetBytes, "files", r.Blobs, "reclaimed_bytes", r.Reclaimed, "older_than", retain.String())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	m.onClose(func(context.Context) error {
		cancel()
		<-done
		return nil
	})
	m.Logger.Info("retention", "older_than", retain.String(), "every", retentionEvery(retain).String())
}

// countedDeletes is the store with every batch deletion (a DELETE, a
// prune) added to the removed_total metrics.
type countedDeletes struct {
	store.Store
	removed func(store.Deleted)
}

func (c countedDeletes) DeleteBatch(ctx context.Context, actor, id string) (store.Deleted, error) {
	d, err := c.Store.DeleteBatch(ctx, actor, id)
	if err == nil {
		c.removed(d)
	}
	return d, err
}

const tokenUsage = `usage:
  studio token create --actor NAME [--name LABEL] [--expires 90d]   print a new token (shown only now)
  studio token list   [--actor NAME]                                 id, actor, label, created, expires, last used (to the hour)
  studio token revoke ID                                             the token stops working at once (within 1s on every instance)

Each also takes --data DIR or --database URL (see "studio token create -h").
`

func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, tokenUsage)
		return errUsage
	}
	cfg := DefaultConfig()
	fs, applyEnv := newFlagSet(cmdToken, &cfg, stderr)
	fs.Init("studio token "+args[0], flag.ContinueOnError)
	var actor, label string
	var expires age
	var rest []string
	asJSON := jsonFlag(fs)
	sub := args[0]
	switch sub {
	case "create":
		fs.StringVar(&actor, "actor", "", "the actor the token acts for (required)")
		fs.StringVar(&label, "name", "", "a label to tell the token apart in `studio token list`")
		fs.Var(&expires, "expires", "the token stops working after this long (30d, 12h); 0 = never")
	case "list":
		fs.StringVar(&actor, "actor", "", "only this actor's tokens")
	case "revoke":
		if len(args) < 2 || strings.HasPrefix(args[1], "-") {
			fmt.Fprint(stderr, "usage: studio token revoke ID [--data DIR | --database URL]\n")
			return errUsage
		}
		rest, args = args[1:2], args[1:]
	default:
		fmt.Fprint(stderr, tokenUsage)
		return errUsage
	}
	if err := parseConfig(fs, args[1:], applyEnv, &cfg); err != nil {
		return err
	}
	if sub == "create" {
		if err := validateActor(actor); err != nil {
			return &cliError{exitUsage, err}
		}
	}
	s, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	switch sub {
	case "revoke":
		t, err := s.RevokeToken(ctx, rest[0])
		switch intent.ErrorCode(err) {
		case "":
		case intent.EInvalid, intent.ENotFound: // a bad argument
			return usageErr("revoke %s: %s", rest[0], "no such token (studio token list shows them)")
		default:
			return fmt.Errorf("revoke %s: %w", rest[0], err)
		}
		if *asJSON {
			return printJSON(stdout, tokenView(t, time.Now()))
		}
		fmt.Fprintf(stdout, "revoked %s (actor %s%s) at %s\n", t.ID, t.Actor, labelled(t.Label), t.RevokedAt.Format(time.RFC3339))
		return nil
	case "create":
		token, err := httpapi.NewToken()
		if err != nil {
			return err
		}
		nt := store.NewToken{Actor: actor, Hash: httpapi.HashToken(token), Label: label}
		if expires > 0 {
			nt.ExpiresAt = time.Now().Add(time.Duration(expires))
		}
		t, err := s.IssueToken(ctx, nt)
		if err != nil {
			return fmt.Errorf("store token: %w", err)
		}
		if *asJSON {
			v := tokenView(t, time.Now())
			v.Token = token
			return printJSON(stdout, v)
		}
		fmt.Fprintln(stdout, token)
		fmt.Fprintf(stderr, "token %s for %s%s, %s\n", t.ID, t.Actor, labelled(t.Label), expiry(t))
		return nil
	default:
		toks, err := s.ListTokens(ctx, actor)
		if err != nil {
			return err
		}
		now := time.Now()
		if *asJSON {
			for _, t := range toks {
				if err := printJSON(stdout, tokenView(t, now)); err != nil {
					return err
				}
			}
			return nil
		}
		w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tACTOR\tLABEL\tCREATED\tEXPIRES\tLAST USED\tSTATE")
		for _, t := range toks {
			state := tokenState(t, now)
			if state == "revoked" {
				state = "revoked " + t.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Actor, dash(t.Label), t.CreatedAt.Format(time.RFC3339),
				stamp(t.ExpiresAt), stamp(t.LastUsedAt), state)
		}
		return w.Flush()
	}
}

// tokenState is live, expired or revoked.
func tokenState(t store.Token, now time.Time) string {
	switch {
	case !t.RevokedAt.IsZero():
		return "revoked"
	case !t.Live(now):
		return "expired"
	}
	return "live"
}

// tokenJSON is a token as token create, list and revoke print it with
// --json; the secret only from create.
type tokenJSON struct {
	ID         string     `json:"id"`
	Token      string     `json:"token,omitempty"`
	Actor      string     `json:"actor"`
	Label      string     `json:"label"`
	State      string     `json:"state"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

func tokenView(t store.Token, now time.Time) tokenJSON {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	return tokenJSON{ID: t.ID, Actor: t.Actor, Label: t.Label, State: tokenState(t, now), CreatedAt: t.CreatedAt.UTC(),
		ExpiresAt: opt(t.ExpiresAt), LastUsedAt: opt(t.LastUsedAt), RevokedAt: opt(t.RevokedAt)}
}

func labelled(label string) string {
	if label == "" {
		return ""
	}
	return ", " + strconv.Quote(label)
}

func expiry(t store.Token) string {
	if t.ExpiresAt.IsZero() {
		return "never expires"
	}
	return "expires " + t.ExpiresAt.Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func runPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	fs, applyEnv := newFlagSet(cmdPrune, &cfg, stderr)
	var olderThan age
	var dryRun bool
	sweepAge := worker.DefaultSweepAge
	fs.Var(&olderThan, "older-than", "delete the ended batches whose last change is older than this (30d, 12h) (required)")
	fs.BoolVar(&dryRun, "dry-run", false, "count what would go; delete nothing")
	fs.DurationVar(&sweepAge, "sweep-age", sweepAge, "remove the asset files no asset names any more once untouched this long")
	asJSON := jsonFlag(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: studio prune --older-than AGE [--dry-run] [flags]\n\n"+
			"Deletes every ended batch whose last change is older than AGE, with its tasks, assets and\n"+
			"publications, one transaction per batch, then the asset files no asset names any more, then\n"+
			"(SQLite) gives the freed pages back to the filesystem. A batch's request id is free once it\n"+
			"is gone. Safe beside running servers and workers.\n\n")
		fs.PrintDefaults()
	}
	if err := parseConfig(fs, args, applyEnv, &cfg); err != nil {
		return err
	}
	if olderThan == 0 {
		fmt.Fprintln(stderr, "studio prune: --older-than is required (30d keeps the last 30 days)")
		return errUsage
	}
	e, err := openEngine(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.store.Close()
	var blobs blob.Store
	if !dryRun {
		if blobs, err = e.blobs(); err != nil {
			return err
		}
	}
	r, err := prunePass(ctx, e.store, blobs, e.reclaim, time.Now().Add(-time.Duration(olderThan)), dryRun, sweepAge)
	if *asJSON {
		if jerr := printJSON(stdout, map[string]any{"dry_run": dryRun, "batches": r.Batches, "tasks": r.Tasks, "assets": r.Assets,
			"asset_bytes": r.AssetBytes, "files_removed": r.Blobs, "bytes_reclaimed": r.Reclaimed}); err == nil {
			err = jerr
		}
		return err
	}
	verb := "deleted"
	if dryRun {
		verb = "would delete"
	}
	fmt.Fprintf(stdout, "%s %d batches, %d tasks, %d assets (%d bytes); %d files removed; %d bytes given back to the filesystem\n",
		verb, r.Batches, r.Tasks, r.Assets, r.AssetBytes, r.Blobs, r.Reclaimed)
	return err
}

func runVacuum(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	fs, applyEnv := newFlagSet(cmdVacuum, &cfg, stderr)
	asJSON := jsonFlag(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: studio vacuum [flags]\n\n"+
			"SQLite only. Rewrites studio.db (VACUUM) in auto_vacuum=INCREMENTAL mode, so that the pages\n"+
			"deletions free go back to the filesystem from then on (prunes do it as they go). Files made\n"+
			"by this version are in that mode already; one made before needs this once. It holds the\n"+
			"write lock for the whole rewrite (creates wait) and needs free space of the file's size.\n\n")
		fs.PrintDefaults()
	}
	if err := parseConfig(fs, args, applyEnv, &cfg); err != nil {
		return err
	}
	if cfg.isPostgres() {
		return usageErr("vacuum is for SQLite; PostgreSQL's autovacuum reuses freed space (VACUUM FULL gives it back)")
	}
	e, err := openEngine(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.store.Close()
	before, after, err := e.vacuum(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, map[string]any{"database": cfg.sqlitePath(), "bytes_before": before, "bytes_after": after, "auto_vacuum": "INCREMENTAL"})
	}
	fmt.Fprintf(stdout, "vacuumed %s: %d bytes -> %d bytes; auto_vacuum=INCREMENTAL\n", cfg.sqlitePath(), before, after)
	return nil
}

func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	fs, applyEnv := newFlagSet(cmdBackup, &cfg, stderr)
	asJSON := jsonFlag(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: studio backup DIR [flags]\n\n"+
			"SQLite only. Copies a live studio into DIR (which must not exist): DIR/studio.db, one\n"+
			"consistent snapshot made with VACUUM INTO while creates and workers carry on, and\n"+
			"DIR/assets with the bytes of every asset it names, each checked against its SHA-256.\n"+
			"Restore: stop studio, put DIR in place of the data directory (or serve --data DIR).\n"+
			"The token file is not copied: tokens live in studio.db.\n\n")
		fs.PrintDefaults()
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs.Usage()
		return errUsage
	}
	dir := args[0]
	if err := parseConfig(fs, args[1:], applyEnv, &cfg); err != nil {
		return err
	}
	if cfg.isPostgres() {
		return usageErr("backup is for SQLite; on PostgreSQL use pg_dump (docs/postgres.md)")
	}
	if _, err := os.Stat(dir); err == nil {
		return usageErr("%s exists; give a new directory", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	s, err := sqlite.Open(ctx, sqlite.Config{Path: cfg.sqlitePath(), Synchronous: cfg.Synchronous})
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer s.Close()
	shas, err := s.BackupTo(ctx, filepath.Join(dir, "studio.db"))
	if err != nil {
		return err
	}
	src, err := blob.NewFS(filepath.Join(cfg.Data, "assets"))
	if err != nil {
		return err
	}
	dst, err := blob.NewFS(filepath.Join(dir, "assets"))
	if err != nil {
		return err
	}
	var bytes int64
	for _, sha := range shas {
		r, err := src.Open(ctx, sha)
		if err != nil {
			return fmt.Errorf("backup asset %s: %w", sha, err)
		}
		info, err := dst.Put(ctx, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("backup asset %s: %w", sha, err)
		}
		if info.SHA256 != sha {
			return fmt.Errorf("backup asset %s: the stored bytes hash to %s", sha, info.SHA256)
		}
		bytes += info.Size
	}
	if *asJSON {
		return printJSON(stdout, map[string]any{"database": cfg.sqlitePath(), "dir": dir, "integrity": "ok", "asset_files": len(shas), "asset_bytes": bytes})
	}
	fmt.Fprintf(stdout, "backed up %s to %s: studio.db (integrity ok) and %d asset files (%d bytes, each sha256 checked)\n",
		cfg.sqlitePath(), dir, len(shas), bytes)
	return nil
}
