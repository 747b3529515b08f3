-- Tokens that can be named, expired and revoked (as migrations/sqlite/0010).
-- A token's public id is the first 16 hex digits of its hash
-- (store.TokenID), read as a range of the primary key (COLLATE "C").
ALTER TABLE tokens ADD COLUMN label text NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN expires_at timestamptz;
ALTER TABLE tokens ADD COLUMN revoked_at timestamptz;
ALTER TABLE tokens ADD COLUMN last_used_at timestamptz; -- to the hour

-- Bumped by every write that can make a value a process remembers stale
-- (a token revoked, a batch deleted): store.Cache reads it to know when to
-- forget.
CREATE TABLE cache_epoch (
    id    integer PRIMARY KEY CHECK (id = 1),
    epoch bigint NOT NULL
);
INSERT INTO cache_epoch (id, epoch) VALUES (1, 0);
