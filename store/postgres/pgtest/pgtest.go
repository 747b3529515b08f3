// Package pgtest gives tests a PostgreSQL schema of their own on the server
// named by STUDIO_TEST_POSTGRES_URL, so parallel tests and CI runs sharing
// one database never see each other's rows. Without the variable the test is
// skipped with a message that names it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL is the environment variable holding the test server's URL, e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
const EnvURL = "STUDIO_TEST_POSTGRES_URL"

// URL returns the test server's URL, or skips the test when it is unset.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		announceSkip()
		t.Skip(skipMessage)
	}
	return u
}

const skipMessage = "PostgreSQL tests need a server: set " + EnvURL + "=postgres://user@host:port/db?sslmode=disable"

var announceOnce sync.Once

// announceSkip says once, without -v, that the PostgreSQL tests were
// skipped and how to run them. `go test ./...` shows nothing of a passing
// package's output but its ok line, so the line goes to the stderr of the
// go command that runs this test binary (its parent, through /proc: Linux
// only; elsewhere the skip message shows with -v). Test binaries of one
// `go test` run share the go command's work directory, which holds the
// binaries and is removed when the run ends: a marker file there makes the
// line print once for the whole run, not once per package.
func announceSkip() {
	announceOnce.Do(func() {
		marker := filepath.Join(filepath.Dir(filepath.Dir(os.Args[0])), "studio-pgtest-skipped")
		f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return // another package of this run said it, or no place to mark it
		}
		_ = f.Close()
		out, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", os.Getppid()), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return
		}
		defer out.Close()
		if fi, err := out.Stat(); err != nil || fi.Mode().IsRegular() {
			// A file: the go command writes it at its own offset and would
			// write over the line. A terminal or a pipe keeps it.
			return
		}
		fmt.Fprintf(out, "studio: PostgreSQL tests skipped; to run them: %s='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' go test ./...\n", EnvURL)
	})
}

// Schema creates a fresh schema on the test server, dropped (with all it
// holds) when the test ends. It returns the schema's name and a URL whose
// search_path is that schema, usable by this process or a child process.
func Schema(t testing.TB) (schemaURL, schema string) {
	t.Helper()
	base := URL(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema = "studio_test_" + hex.EncodeToString(b[:])
	exec(t, base, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize())
	t.Cleanup(func() { exec(t, base, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`) })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

func exec(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the test server (%s): %v", EnvURL, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
