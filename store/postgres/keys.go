package postgres

import (
	"context"
	"crypto/rand"
	"fmt"
)

// cursorKeyName is the server_keys row of the cursor key.
const cursorKeyName = "cursor"

// CursorKey returns the database's cursor key, making it on first use. The
// insert does nothing when a key is there (or waits for a racing insert to
// commit, then does nothing); the read after it, a statement of its own
// with a fresh snapshot, answers the key kept.
func (s *Store) CursorKey(ctx context.Context) ([]byte, error) {
	var key []byte
	err := s.pool.QueryRow(ctx, `SELECT key FROM server_keys WHERE name = $1`, cursorKeyName).Scan(&key)
	if err == nil {
		return key, nil
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("make cursor key: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO server_keys (name, key, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING`, cursorKeyName, fresh, stamp(s.now())); err != nil {
		return nil, fmt.Errorf("store cursor key: %w", interpret(err))
	}
	if err := s.pool.QueryRow(ctx, `SELECT key FROM server_keys WHERE name = $1`, cursorKeyName).Scan(&key); err != nil {
		return nil, fmt.Errorf("read cursor key: %w", interpret(err))
	}
	return key, nil
}
