// Package pgtest gives tests a PostgreSQL schema of their own on the server
// named by STUDIO_TEST_POSTGRES_URL, so parallel tests and CI runs sharing
// one database never see each other's rows. Without the variable the test is
// skipped with a message that names it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/internal/testskip"
)

// EnvURL is the environment variable holding the test server's URL, e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
const EnvURL = "STUDIO_TEST_POSTGRES_URL"

// URL returns the test server's URL, or skips the test when it is unset.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		testskip.PostgreSQL.Announce()
		t.Skip(skipMessage)
	}
	return u
}

const skipMessage = "PostgreSQL tests need a server: set " + EnvURL + "=postgres://user@host:port/db?sslmode=disable"

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
