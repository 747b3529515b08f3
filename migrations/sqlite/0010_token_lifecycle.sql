-- Tokens that can be named, expired and revoked. A token's public id is
-- the first 16 hex digits of its hash (store.TokenID): read as a range of
-- the primary key, so it needs no column of its own.
ALTER TABLE tokens ADD COLUMN label TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN expires_at INTEGER;   -- ms; NULL = never
ALTER TABLE tokens ADD COLUMN revoked_at INTEGER;   -- ms; NULL = live
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER; -- ms, to the hour

-- A number bumped by every write that can make a value a process
-- remembers stale (a token revoked, a batch deleted): store.Cache reads
-- it to know when to forget (bounded staleness across processes).
CREATE TABLE cache_epoch (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL
);
INSERT INTO cache_epoch (id, epoch) VALUES (1, 0);
