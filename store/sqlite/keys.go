package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
)

// cursorKeyName is the server_keys row of the cursor key.
const cursorKeyName = "cursor"

// CursorKey returns the database's cursor key, making it on first use: the
// insert does nothing when a key is there (another process made it first),
// and the key read after it is the one kept.
func (s *Store) CursorKey(ctx context.Context) ([]byte, error) {
	const readKey = `SELECT key FROM server_keys WHERE name = ?`
	var key []byte
	err := s.read(ctx, func(t *tx) error { return t.queryRow(readKey, cursorKeyName).Scan(&key) })
	if err == nil {
		return key, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("read cursor key: %w", err)
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("make cursor key: %w", err)
	}
	err = s.write(ctx, func(t *tx) error {
		if _, err := t.exec(`INSERT INTO server_keys (name, key, created_at) VALUES (?, ?, ?)
			ON CONFLICT (name) DO NOTHING`, cursorKeyName, fresh, ms(s.now())); err != nil {
			return err
		}
		return t.queryRow(readKey, cursorKeyName).Scan(&key)
	})
	if err != nil {
		return nil, fmt.Errorf("store cursor key: %w", interpret(err))
	}
	return key, nil
}
