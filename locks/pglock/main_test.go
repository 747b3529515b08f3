package pglock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/internal/testskip"
)

// envURL names the test server, e.g.
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable. Without it the
// tests that need a server are skipped, saying so.
const envURL = "STUDIO_TEST_POSTGRES_URL"

func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(envURL)
	if u == "" {
		testskip.PostgreSQL.Announce()
		t.Skip("PostgreSQL tests need a server: set " + envURL + "=postgres://user@host:port/db?sslmode=disable")
	}
	return u
}

// testSchema creates a schema of the test's own, dropped when it ends.
func testSchema(t testing.TB) string {
	t.Helper()
	base := testURL(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema := "pglock_test_" + hex.EncodeToString(b[:])
	execSQL(t, base, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize())
	t.Cleanup(func() { execSQL(t, base, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`) })
	return schema
}

// withSearchPath returns base with search_path set to schema.
func withSearchPath(t testing.TB, base, schema string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", envURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func execSQL(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the test server (%s): %v", envURL, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestRefusesStricterIsolation: sessions that default to repeatable read
// (here through the URL, as a role's or database's setting would) are
// refused at once, with a message naming the setting; read committed
// passes.
func TestRefusesStricterIsolation(t *testing.T) {
	t.Parallel()
	dsn := withSearchPath(t, testURL(t), testSchema(t))
	for _, iso := range []string{"repeatable read", "serializable"} {
		s, err := Open(context.Background(), dsn+"&default_transaction_isolation="+strings.ReplaceAll(iso, " ", "%20"))
		if err == nil {
			s.Close()
			t.Fatalf("%s: opened", iso)
		}
		if !strings.Contains(err.Error(), "default_transaction_isolation") || !strings.Contains(err.Error(), iso) {
			t.Errorf("%s: %v", iso, err)
		}
	}
	s, err := Open(context.Background(), dsn+"&default_transaction_isolation=read%20committed")
	if err != nil {
		t.Fatalf("read committed: %v", err)
	}
	s.Close()
}
