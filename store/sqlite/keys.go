package sqlite

import (
	"context"
	"crypto/rand"
	"fmt"
)

// cursorKeyName is the server_keys row of the cursor key.
const cursorKeyName = "cursor"

// CursorKey returns the database's cursor key, making it on first use: the
// insert does nothing when a key is there (another process made it first),
// and the key read after it is the one kept.
func (s *Store) CursorKey(ctx context.Context) ([]byte, error) {
	var key []byte
	err := s.read.QueryRowContext(ctx, `SELECT key FROM server_keys WHERE name = ?`, cursorKeyName).Scan(&key)
	if err == nil {
		return key, nil
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("make cursor key: %w", err)
	}
	if _, err := s.write.ExecContext(ctx, `INSERT INTO server_keys (name, key, created_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO NOTHING`, cursorKeyName, fresh, ms(s.now())); err != nil {
		return nil, fmt.Errorf("store cursor key: %w", interpret(err))
	}
	if err := s.write.QueryRowContext(ctx, `SELECT key FROM server_keys WHERE name = ?`, cursorKeyName).Scan(&key); err != nil {
		return nil, fmt.Errorf("read cursor key: %w", interpret(err))
	}
	return key, nil
}
