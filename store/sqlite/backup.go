package sqlite

import (
	"context"
	"fmt"
	"os"
)

// BackupTo writes a consistent copy of the live database to path (which
// must not exist) with VACUUM INTO, on a connection of its own: the copy
// is one read snapshot, so creates and workers carry on beside it (a
// WAL reader takes no write lock). It answers the SHA-256 of every asset
// the copy names, whose bytes must go with it, and checks the copy's
// integrity.
func (s *Store) BackupTo(ctx context.Context, path string) ([]string, error) {
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("backup: %s exists", path)
	}
	db := openDB("file:" + s.path + "?_pragma=busy_timeout(10000)")
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	cp := openDB("file:" + path + "?_pragma=query_only(1)")
	defer cp.Close()
	var ok string
	if err := cp.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		return nil, fmt.Errorf("backup: integrity check of the copy: %q, %v", ok, err)
	}
	rows, err := cp.QueryContext(ctx, `SELECT DISTINCT sha256 FROM assets ORDER BY sha256`)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer rows.Close()
	var shas []string
	for rows.Next() {
		var sha string
		if err := rows.Scan(&sha); err != nil {
			return nil, fmt.Errorf("backup: %w", err)
		}
		shas = append(shas, sha)
	}
	return shas, rows.Err()
}
