package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// DownloadOptions tune Download.
type DownloadOptions struct {
	// Parallel is how many images are fetched at once; 4 by default.
	Parallel int
	// OnFile, when set, is called after each file is saved or found
	// already saved (one call at a time).
	OnFile func(DownloadedFile)
}

// DownloadedFile is one image Download saved.
type DownloadedFile struct {
	Task Task
	// Asset is the task's image as the server describes it: its id, size
	// and SHA-256, which the file's bytes match.
	Asset Asset
	// Path is where the image is, in the directory given.
	Path string
	// Skipped is set when the file was already there with the same bytes.
	Skipped bool
}

// Download saves the images of a batch's succeeded tasks in dir (made if
// missing), one file per task, named from its collection, frame, generator
// and candidate (characters other than letters, digits, '.', '-' and '_'
// become '_'). Each file is written to a temporary name, checked against
// the asset's SHA-256 (from GetAsset) and renamed, so a file that
// exists is whole; a file already there with the right bytes is kept, so
// Download can be run again after an interruption. Tasks that have not
// succeeded are left out; it answers the files of those that have.
func (c *Client) Download(ctx context.Context, batchID, dir string, o DownloadOptions) ([]DownloadedFile, error) {
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	tasks, err := c.AllTasks(ctx, batchID, StateSucceeded)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", batchID, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("download %s: %w", batchID, err)
	}
	names := fileNames(tasks)
	out := make([]DownloadedFile, len(tasks))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	work := make(chan int)
	for w := 0; w < o.Parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f, err := c.downloadOne(ctx, tasks[i], filepath.Join(dir, names[i]))
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				if err == nil {
					out[i] = f
					if o.OnFile != nil {
						o.OnFile(f)
					}
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range tasks {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("download %s: %w", batchID, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("download %s: %w", batchID, err)
	}
	return out, nil
}

// fileNames names each task's file, unique within the batch.
func fileNames(tasks []Task) []string {
	used := map[string]bool{}
	out := make([]string, len(tasks))
	for i, t := range tasks {
		base := fmt.Sprintf("%s-%s-%s-%d", safeName(t.Collection), safeName(t.Frame), safeName(t.Generator), t.Candidate)
		name := base
		for n := 2; used[strings.ToLower(name)]; n++ {
			name = fmt.Sprintf("%s~%d", base, n)
		}
		used[strings.ToLower(name)] = true
		out[i] = name
	}
	return out
}

// safeName keeps letters, digits, '.', '-' and '_' of s; it never answers
// "", "." or "..".
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := strings.Trim(b.String(), ".")
	if out == "" {
		out = "_"
	}
	if len(out) > 80 {
		out = out[:80]
	}
	return out
}

// extension is the file extension of an image type.
func extension(contentType string) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/webp":
		return ".webp"
	}
	return ".bin"
}

// downloadOne saves one task's image at base + its extension.
func (c *Client) downloadOne(ctx context.Context, t Task, base string) (DownloadedFile, error) {
	if t.AssetID == nil {
		return DownloadedFile{}, fmt.Errorf("task %s succeeded without an asset", t.ID)
	}
	asset, err := c.GetAsset(ctx, *t.AssetID)
	if err != nil {
		return DownloadedFile{}, err
	}
	path := base + extension(asset.ContentType)
	f := DownloadedFile{Task: t, Asset: *asset, Path: path}
	if sum, err := fileSHA256(path); err == nil && sum == asset.SHA256 {
		f.Skipped = true
		return f, nil
	}
	data, _, err := c.AssetContent(ctx, asset.ID)
	if err != nil {
		return DownloadedFile{}, err
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != asset.SHA256 {
		return DownloadedFile{}, fmt.Errorf("asset %s: the bytes received do not match its sha256", asset.ID)
	}
	if err := writeFileAtomic(path, data); err != nil {
		return DownloadedFile{}, fmt.Errorf("save %s: %w", path, err)
	}
	return f, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeFileAtomic writes data to a temporary file beside path, syncs it
// and renames it over path.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
	}
	return werr
}
