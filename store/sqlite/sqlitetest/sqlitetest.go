// Package sqlitetest holds what tests of several packages do to a SQLite
// studio database from outside the store.
package sqlitetest

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// HoldWriteLock takes the write lock of the database at path on a
// connection of its own (BEGIN IMMEDIATE), as another process would (a
// backup tool, a second studio, a sqlite3 shell in a transaction), and
// answers its release; the test's cleanup releases it too.
func HoldWriteLock(t testing.TB, path string) (release func()) {
	t.Helper()
	ctx := context.Background()
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	holder, err := other.Conn(ctx)
	if err != nil {
		other.Close()
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		holder.Close()
		other.Close()
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := holder.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Error(err)
			}
			holder.Close()
			other.Close()
		})
	}
	t.Cleanup(release)
	return release
}
