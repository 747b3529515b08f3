-- Uploads with client keys, and publications with their items.

-- One row per (actor, client key) of an upload: the asset the key's first
-- upload made and the SHA-256 of its bytes (a retry with other bytes is a
-- conflict). Uploaded assets are rows of assets with no task.
CREATE TABLE upload_keys (
    actor      TEXT NOT NULL,
    client_key TEXT NOT NULL,
    asset_id   TEXT NOT NULL REFERENCES assets (id),
    sha256     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (actor, client_key)
) WITHOUT ROWID;

-- The record a publication intent creates. Counts are kept on the row and
-- move in the same transaction as the items, as for batches.
CREATE TABLE publications (
    id         TEXT PRIMARY KEY,
    actor      TEXT NOT NULL,
    request_id TEXT NOT NULL,
    batch_id   TEXT NOT NULL REFERENCES batches (id),
    channel    TEXT NOT NULL,
    item_count INTEGER NOT NULL,
    queued     INTEGER NOT NULL,
    running    INTEGER NOT NULL DEFAULT 0,
    succeeded  INTEGER NOT NULL DEFAULT 0,
    failed     INTEGER NOT NULL DEFAULT 0,
    started    INTEGER NOT NULL DEFAULT 0, -- 1 once any item was claimed
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX publications_by_actor ON publications (actor, id);

-- One item per published asset, leased to workers like a task: every
-- claim bumps the fence, every later write names it.
CREATE TABLE publication_items (
    id               TEXT PRIMARY KEY,
    publication_id   TEXT NOT NULL REFERENCES publications (id),
    asset_id         TEXT NOT NULL REFERENCES assets (id),
    state            TEXT NOT NULL DEFAULT 'queued',
    attempts         INTEGER NOT NULL DEFAULT 0,
    released         INTEGER NOT NULL DEFAULT 0,   -- graceful hand-backs, not counted against the maximum
    fence            INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at INTEGER,                      -- database clock, ms
    run_after        INTEGER NOT NULL DEFAULT 0,   -- not claimable before (backoff)
    error            TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    UNIQUE (publication_id, asset_id)
);
CREATE INDEX publication_items_queued ON publication_items (id, run_after) WHERE state = 'queued';
CREATE INDEX publication_items_leased ON publication_items (lease_expires_at) WHERE state = 'running';
