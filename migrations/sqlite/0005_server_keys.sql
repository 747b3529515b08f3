-- Secret keys the server makes once and keeps, shared by every process on
-- the database. One row per use: 'cursor' signs list cursors (HMAC-SHA256),
-- so that a cursor one instance made is accepted by every other.
CREATE TABLE server_keys (
    name       TEXT PRIMARY KEY,
    key        BLOB NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
