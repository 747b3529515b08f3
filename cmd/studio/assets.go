package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"studio/blob"
	"studio/blob/s3blob"
)

const assetsUsage = `usage: studio assets copy --to s3://BUCKET/PREFIX?endpoint=...&region=... [--data DIR | --database URL] [--assets SOURCE]

Copies every stored asset's bytes from this studio's asset store (files
under --data on SQLite, the blobs table on PostgreSQL, or --assets) to the
object store --to names, verifying each: read from the source and checked
against its SHA-256, written, read back from the object store and checked
again. Bytes already in the object store whole are left as they are, so
the copy can be stopped and run again (it resumes) as often as needed
(idempotent). Credentials come from the standard AWS variables or
credentials file. Then start every process with --assets set to the same
URL.
`

// runAssets is `studio assets copy`.
func runAssets(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "copy" {
		fmt.Fprint(stderr, assetsUsage)
		return errUsage
	}
	cfg := DefaultConfig()
	fs, applyEnv := newFlagSet(cmdAssets, &cfg, stderr)
	to := fs.String("to", "", "the object store to copy to: s3://BUCKET/PREFIX?endpoint=...&region=... (required)")
	jobs := fs.Int("jobs", 4, "objects copied at once")
	asJSON := jsonFlag(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), assetsUsage+"\n")
		fs.PrintDefaults()
	}
	if err := parseConfig(fs, args[1:], applyEnv, &cfg); err != nil {
		return err
	}
	if !s3blob.IsURL(*to) || *jobs < 1 {
		fmt.Fprintln(stderr, "--to must be an s3:// URL and --jobs at least 1")
		return errUsage
	}
	if *to == cfg.Assets {
		return usageErr("--to names the store the assets are in already")
	}
	if err := makeDataDir(cfg.Data); err != nil {
		return err
	}
	e, err := openEngine(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.store.Close()
	src, err := e.blobs()
	if err != nil {
		return err
	}
	walker, ok := src.(blob.Walker)
	if !ok {
		return fmt.Errorf("the asset store %T cannot list its blobs", src)
	}
	dst, err := openAssets(*to)
	if err != nil {
		return err
	}
	res, err := copyBlobs(ctx, walker, src, dst, *jobs, stderr)
	if *asJSON {
		printJSON(stdout, map[string]int64{"copied": res.copied.Load(), "already_there": res.present.Load(), "failed": res.failed.Load()})
	} else {
		fmt.Fprintf(stdout, "%d copied, %d already there, %d failed\n", res.copied.Load(), res.present.Load(), res.failed.Load())
	}
	if err != nil {
		return err
	}
	if n := res.failed.Load(); n > 0 {
		return fmt.Errorf("%d blobs were not copied (listed above); run the copy again", n)
	}
	return nil
}

// copyResult counts what a copy did.
type copyResult struct {
	copied, present, failed atomic.Int64
}

// copyBlobs copies every blob walker lists from src to dst, jobs at a
// time. A blob already in dst whole is skipped; each copied one is read
// back and verified. A blob that cannot be copied is reported on errs and
// counted; the walk goes on.
func copyBlobs(ctx context.Context, walker blob.Walker, src blob.Store, dst blob.Store, jobs int, errs io.Writer) (*copyResult, error) {
	res := &copyResult{}
	shas := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range jobs {
		wg.Go(func() {
			for sha := range shas {
				copied, err := copyBlob(ctx, src, dst, sha)
				switch {
				case err != nil:
					res.failed.Add(1)
					mu.Lock()
					fmt.Fprintf(errs, "%s: %v\n", sha, err)
					mu.Unlock()
				case copied:
					res.copied.Add(1)
				default:
					res.present.Add(1)
				}
			}
		})
	}
	err := walker.Walk(ctx, func(sha string) error {
		select {
		case shas <- sha:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	close(shas)
	wg.Wait()
	if err != nil {
		return res, fmt.Errorf("list the assets: %w", err)
	}
	return res, nil
}

// copyBlob copies one blob unless dst has it whole already, and verifies
// the copy; it says whether it copied.
func copyBlob(ctx context.Context, src, dst blob.Store, sha string) (bool, error) {
	if err := readVerified(ctx, dst, sha); err == nil {
		return false, nil
	} else if !errors.Is(err, blob.ErrNotFound) && !errors.Is(err, blob.ErrCorrupt) {
		return false, err
	}
	f, err := src.Open(ctx, sha)
	if err != nil {
		return false, fmt.Errorf("read the source: %w", err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return false, fmt.Errorf("read the source: %w", err)
	}
	info, err := dst.Put(ctx, bytes.NewReader(data))
	if err != nil {
		return false, fmt.Errorf("write: %w", err)
	}
	if info.SHA256 != sha {
		return false, fmt.Errorf("%w: the source gave other bytes", blob.ErrCorrupt)
	}
	if err := readVerified(ctx, dst, sha); err != nil {
		return false, fmt.Errorf("read back: %w", err)
	}
	return true, nil
}

// readVerified reads a blob whole from s (whose Open verifies it).
func readVerified(ctx context.Context, s blob.Store, sha string) error {
	f, err := s.Open(ctx, sha)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}
