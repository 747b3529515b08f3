-- The locks engine's store (package locks; locks/pglock, which creates these
-- tables itself, IF NOT EXISTS, when a schema has none, and adds lock_slots.slot_limit).
-- Every statement here is IF NOT EXISTS too, so a schema whose lock tables
-- pglock made first migrates as is.
-- Times are timestamptz of the database's clock. Keys are bytea of their
-- UTF-8 bytes, so they compare byte for byte: no collation, no case
-- folding, no normalization, and an embedded NUL is kept (text cannot
-- hold one).

-- One counter for every fence this database hands out, locks and semaphore
-- slots alike. A sequence never goes back: nextval is not undone by a
-- rollback, survives restarts (after a crash it may skip ahead, never
-- back), and with CACHE 1 every session draws from the same counter, so a
-- later draw is larger than every earlier one. MAXVALUE refuses to pass
-- 2^53-1.
CREATE SEQUENCE IF NOT EXISTS lock_fence AS bigint MINVALUE 1 MAXVALUE 9007199254740991 CACHE 1 NO CYCLE;

-- A lock: at most one row per key. A row whose expires_at is not after now
-- is free to take (and to delete).
CREATE TABLE IF NOT EXISTS locks (
    key        bytea PRIMARY KEY,
    owner      text NOT NULL,
    fence      bigint NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS locks_by_expiry ON locks (expires_at);

-- A semaphore's slots: one row per holder.
CREATE TABLE IF NOT EXISTS lock_slots (
    key        bytea NOT NULL,
    owner      text NOT NULL,
    fence      bigint NOT NULL CHECK (fence BETWEEN 1 AND 9007199254740991),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
);
CREATE INDEX IF NOT EXISTS lock_slots_by_expiry ON lock_slots (expires_at);
