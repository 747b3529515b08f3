-- The core of studio: tokens, request-id bindings, batches, tasks, assets.
-- Times are integer milliseconds since the Unix epoch (UTC).

CREATE TABLE tokens (
    hash       TEXT PRIMARY KEY,           -- hex SHA-256 of the token
    actor      TEXT NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per (actor, request id): the fingerprint of the input the id was
-- first used with and the record that input created.
CREATE TABLE intents (
    actor       TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    operation   TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (actor, request_id)
) WITHOUT ROWID;

-- Counts are kept on the batch row, changed in the same transaction as the
-- task that moves, so a read of the batch is one row and always consistent.
CREATE TABLE batches (
    id         TEXT PRIMARY KEY,
    actor      TEXT NOT NULL,
    request_id TEXT NOT NULL,
    prompt     TEXT NOT NULL,
    spec       BLOB NOT NULL,              -- canonical JSON of the normalized input
    task_count INTEGER NOT NULL,
    queued     INTEGER NOT NULL,
    running    INTEGER NOT NULL DEFAULT 0,
    succeeded  INTEGER NOT NULL DEFAULT 0,
    failed     INTEGER NOT NULL DEFAULT 0,
    canceled   INTEGER NOT NULL DEFAULT 0,
    started    INTEGER NOT NULL DEFAULT 0, -- 1 once any task was claimed
    cancel_requested INTEGER NOT NULL DEFAULT 0, -- running tasks stop at their next step
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX batches_by_actor ON batches (actor, id);

CREATE TABLE tasks (
    id               TEXT PRIMARY KEY,
    batch_id         TEXT NOT NULL REFERENCES batches (id),
    actor            TEXT NOT NULL,
    collection       TEXT NOT NULL,
    frame            TEXT NOT NULL,
    generator        TEXT NOT NULL,
    candidate        INTEGER NOT NULL,
    state            TEXT NOT NULL DEFAULT 'queued',
    attempts         INTEGER NOT NULL DEFAULT 0,
    fence            INTEGER NOT NULL DEFAULT 0,   -- bumped by every claim
    lease_owner      TEXT,
    lease_expires_at INTEGER,                      -- database clock, ms
    run_after        INTEGER NOT NULL DEFAULT 0,   -- not claimable before (backoff)
    step             TEXT NOT NULL DEFAULT '',     -- last step reached
    provider_ref     TEXT NOT NULL DEFAULT '',     -- the generator's reference
    asset_id         TEXT,
    error            TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX tasks_by_batch ON tasks (batch_id, id);
CREATE INDEX tasks_by_batch_state ON tasks (batch_id, state, id);

CREATE TABLE assets (
    id           TEXT PRIMARY KEY,
    actor        TEXT NOT NULL,
    task_id      TEXT UNIQUE REFERENCES tasks (id),  -- at most one asset per task
    sha256       TEXT NOT NULL,
    content_type TEXT NOT NULL,
    size         INTEGER NOT NULL,
    width        INTEGER NOT NULL,
    height       INTEGER NOT NULL,
    created_at   INTEGER NOT NULL
);
CREATE INDEX assets_by_actor ON assets (actor, id);
