// Package migrations holds the numbered SQL migrations of each database
// engine, embedded in the binary. Files are named NNNN_name.sql; each is
// applied once, in order, in its own transaction, and recorded in the
// schema_migrations table by the engine's store.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed sqlite postgres
var files embed.FS

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// For returns the migrations of an engine ("sqlite" or "postgres") in order.
func For(engine string) ([]Migration, error) {
	entries, err := fs.ReadDir(files, engine)
	if err != nil {
		return nil, fmt.Errorf("read migrations for %s: %w", engine, err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s/%s: name must be NNNN_name.sql", engine, name)
		}
		body, err := fs.ReadFile(files, engine+"/"+name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: rest, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s: version %d used twice", engine, out[i].Version)
		}
	}
	return out, nil
}
