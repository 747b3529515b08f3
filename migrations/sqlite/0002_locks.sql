-- The locks engine's store (package locks; locks/sqlitelock, which creates these
-- tables itself, IF NOT EXISTS, when a database has none, and adds lock_slots.slot_limit).
-- Every statement here is IF NOT EXISTS too, so a database whose lock tables
-- sqlitelock made first migrates as is.
-- Times are integer milliseconds of the database's clock. Keys are BLOBs of
-- their UTF-8 bytes, so they compare byte for byte: no collation, no case
-- folding, no normalization, and an embedded NUL is kept.
--
-- Fences grow per key. A released lock keeps its row (expires_at = 0,
-- free) with the fence it had, and the next acquisition of the key takes
-- that fence + 1. Rows that are free or expired are deleted now and then
-- (the sweep); a deleted row's fence raises lock_fence.floor first, and a
-- key without a row starts from floor + 1. So every acquisition writes one
-- row, as a bare INSERT would, and a key's fences still grow across
-- releases, expiries, sweeps and restarts. CHECKs refuse to pass 2^53-1.

CREATE TABLE IF NOT EXISTS lock_fence (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    floor INTEGER NOT NULL CHECK (floor BETWEEN 0 AND 9007199254740991)
);
INSERT OR IGNORE INTO lock_fence (id, floor) VALUES (1, 0);

-- A lock: one row per key. A row whose expires_at is not after now is free.
CREATE TABLE IF NOT EXISTS locks (
    key        BLOB PRIMARY KEY,
    owner      TEXT NOT NULL,
    fence      INTEGER NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;

-- A semaphore's slots: rows numbered per key. An acquisition takes the
-- lowest free or expired row of the key, or adds one past the highest, so
-- a key has about as many rows as it ever had holders at once; its next
-- fence is above every fence among them (and the floor).
CREATE TABLE IF NOT EXISTS lock_slots (
    key        BLOB NOT NULL,
    slot       INTEGER NOT NULL,
    owner      TEXT NOT NULL,
    fence      INTEGER NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (key, slot)
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS locks_keep_fence AFTER DELETE ON locks
BEGIN
    UPDATE lock_fence SET floor = OLD.fence WHERE id = 1 AND floor < OLD.fence;
END;
CREATE TRIGGER IF NOT EXISTS lock_slots_keep_fence AFTER DELETE ON lock_slots
BEGIN
    UPDATE lock_fence SET floor = OLD.fence WHERE id = 1 AND floor < OLD.fence;
END;
