-- Uploads with client keys, and publications with their items (as
-- migrations/sqlite/0004_uploads_publications.sql).

-- One row per (actor, client key) of an upload: the asset the key's first
-- upload made and the SHA-256 of its bytes (a retry with other bytes is a
-- conflict). Uploaded assets are rows of assets with no task. An upload
-- inserts its asset, then this row with ON CONFLICT DO NOTHING: the primary
-- key makes a second upload of the key wait for the first's transaction.
CREATE TABLE upload_keys (
    actor      text COLLATE "C" NOT NULL,
    client_key text COLLATE "C" NOT NULL,
    asset_id   text COLLATE "C" NOT NULL REFERENCES assets (id),
    sha256     text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (actor, client_key)
);

-- The record a publication intent creates. Counts are kept on the row and
-- move in the same transaction as the items, as for batches.
CREATE TABLE publications (
    id         text COLLATE "C" PRIMARY KEY,
    actor      text COLLATE "C" NOT NULL,
    request_id text NOT NULL,
    batch_id   text COLLATE "C" NOT NULL REFERENCES batches (id),
    channel    text NOT NULL,
    item_count integer NOT NULL,
    queued     integer NOT NULL,
    running    integer NOT NULL DEFAULT 0,
    succeeded  integer NOT NULL DEFAULT 0,
    failed     integer NOT NULL DEFAULT 0,
    started    boolean NOT NULL DEFAULT false, -- true once any item was claimed
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX publications_by_actor ON publications (actor, id);

-- One item per published asset, leased to workers like a task: every
-- claim bumps the fence, every later write names it.
CREATE TABLE publication_items (
    id               text COLLATE "C" PRIMARY KEY,
    publication_id   text COLLATE "C" NOT NULL REFERENCES publications (id),
    asset_id         text COLLATE "C" NOT NULL REFERENCES assets (id),
    state            text NOT NULL DEFAULT 'queued',
    attempts         integer NOT NULL DEFAULT 0,
    released         integer NOT NULL DEFAULT 0,   -- graceful hand-backs, not counted against the maximum
    fence            bigint NOT NULL DEFAULT 0,
    lease_owner      text,
    lease_expires_at timestamptz,                  -- database clock
    run_after        timestamptz NOT NULL DEFAULT '1970-01-01 00:00:00+00', -- not claimable before (backoff)
    error            text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    UNIQUE (publication_id, asset_id)
);
CREATE INDEX publication_items_queued ON publication_items (id) INCLUDE (run_after) WHERE state = 'queued';
CREATE INDEX publication_items_leased ON publication_items (lease_expires_at) WHERE state = 'running';
