-- The locks engine's store (package locks; store/sqlite/lockstore.go).
-- Times are integer milliseconds of the database's clock. Keys are BLOBs of
-- their UTF-8 bytes, so they compare byte for byte: no collation, no case
-- folding, no normalization, and an embedded NUL is kept.

-- One counter for every fence this database hands out, locks and semaphore
-- slots alike: it survives restarts with the file, and its CHECK refuses
-- to pass 2^53-1.
CREATE TABLE lock_fence (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL CHECK (value BETWEEN 0 AND 9007199254740991)
);
INSERT INTO lock_fence (id, value) VALUES (1, 0);

-- A lock: at most one row per key. A row whose expires_at is not after now
-- is free to take (and to delete).
CREATE TABLE locks (
    key        BLOB PRIMARY KEY,
    owner      TEXT NOT NULL,
    fence      INTEGER NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;

-- A semaphore's slots: one row per holder.
CREATE TABLE lock_slots (
    key        BLOB NOT NULL,
    owner      TEXT NOT NULL,
    fence      INTEGER NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (key, owner)
) WITHOUT ROWID;

-- An acquisition draws value + 1 in its own statement and these triggers
-- store it back in the same statement, so the check and the draw are one
-- atomic step. A refused acquisition writes nothing and draws nothing.
CREATE TRIGGER locks_draw_fence_insert AFTER INSERT ON locks
BEGIN
    UPDATE lock_fence SET value = NEW.fence WHERE id = 1;
END;
CREATE TRIGGER locks_draw_fence_update AFTER UPDATE OF fence ON locks
BEGIN
    UPDATE lock_fence SET value = NEW.fence WHERE id = 1;
END;
CREATE TRIGGER lock_slots_draw_fence AFTER INSERT ON lock_slots
BEGIN
    UPDATE lock_fence SET value = NEW.fence WHERE id = 1;
END;
