package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"studio/httpapi"
	"studio/intent"
	"studio/planner"
)

// Limits of the HTTP server that are not httpapi's: how long a client may
// take to send its headers, and how long an idle keep-alive connection
// stays open.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
)

// limitDefaults are the defaults of the limit flags.
func limitDefaults(c *Config) {
	c.BodyTimeout = httpapi.DefaultBodyTimeout
	c.WriteStall = httpapi.DefaultWriteStall
	c.MaxUploadPixels = intent.DefaultMaxUploadPixels
	c.DBWait = httpapi.DefaultDBWait
	c.MinFreeMiB = httpapi.DefaultMinFree >> 20
}

// validateFlags checks the flags that validate does not, each before any
// side effect (opening the database, creating the first token): a URL, an
// address or a file that cannot work fails the command at once.
func (c *Config) validateFlags() []error {
	var errs []error
	if c.WebhookURL != "" {
		u, err := url.Parse(c.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--webhook-url must be an http or https URL with a host, not %q", c.WebhookURL))
		}
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			errs = append(errs, fmt.Errorf("--addr must be HOST:PORT, not %q", c.Addr))
		}
	}
	if c.DebugAddr != "" {
		if _, _, err := net.SplitHostPort(c.DebugAddr); err != nil {
			errs = append(errs, fmt.Errorf("--debug-addr must be HOST:PORT, not %q", c.DebugAddr))
		}
	}
	switch strings.ToUpper(c.Synchronous) {
	case "FULL", "NORMAL":
	default:
		errs = append(errs, fmt.Errorf("--sqlite-synchronous must be FULL or NORMAL, not %q", c.Synchronous))
	}
	if c.Grace < 0 {
		errs = append(errs, errors.New("--grace must be 0 or more"))
	}
	if c.BodyTimeout < 0 {
		errs = append(errs, errors.New("--body-timeout must be 0 (off) or more"))
	}
	if c.WriteStall < 0 {
		errs = append(errs, errors.New("--write-stall must be 0 (off) or more"))
	}
	if c.DBWait < 0 {
		errs = append(errs, errors.New("--db-wait must be 0 (the database's own wait) or more"))
	}
	if c.MinFreeMiB < 0 {
		errs = append(errs, errors.New("--min-free-mib must be 0 (off) or more"))
	}
	if c.MaxUploadPixels < 1 {
		errs = append(errs, errors.New("--max-upload-pixels must be at least 1"))
	}
	if c.Catalog != "" {
		if _, err := planner.LoadCatalog(c.Catalog); err != nil {
			errs = append(errs, fmt.Errorf("--catalog: %w", err))
		}
	}
	return errs
}

// httpLimits are the flags' limits as httpapi takes them: 0 in a flag
// turns a limit off, which httpapi spells as a negative value.
func (c *Config) httpLimits() httpapi.Limits {
	off := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return d
	}
	minFree := c.MinFreeMiB << 20
	if c.MinFreeMiB == 0 {
		minFree = -1
	}
	return httpapi.Limits{BodyTimeout: off(c.BodyTimeout), WriteStall: off(c.WriteStall), DBWait: off(c.DBWait), MinFree: minFree}
}

// uploadDir is where upload bodies are spooled while they are checked:
// DATA/uploads, owner-only, so that a large upload fills the data
// directory's disk rather than /tmp, and other users cannot read it.
// Files a crash left there are removed at a later start once they are a
// day old (a younger one may be another process's upload in progress).
func (m *Main) uploadDir() (string, error) {
	dir := filepath.Join(m.Config.Data, "uploads")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create upload directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("read upload directory: %w", err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), "upload-") && time.Since(info.ModTime()) > 24*time.Hour {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return dir, nil
}

// writeTokenFile writes the first token to DIR/token (0600, in a 0700
// directory made if missing), never over an existing file: written is
// false when one is there.
func writeTokenFile(dir, token string) (written bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create data directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "token"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, err = f.WriteString(token + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name()) // a part of a token is no token
		return false, err
	}
	return true, nil
}

// makeDataDir makes the data directory owner-only (0700) when it is
// missing; what goes in it is owner-only too. An existing directory is
// left as it is.
func makeDataDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	return nil
}
