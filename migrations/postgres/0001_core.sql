-- The core of studio: tokens, request-id bindings, batches, tasks, assets.
-- The same tables as migrations/sqlite/0001_core.sql, in PostgreSQL's types:
-- times are timestamptz, flags boolean, bytes bytea. Ids and keys compare
-- byte-wise (COLLATE "C") whatever the database's collation, so UUIDv7 ids
-- sort by creation and pages follow them.

CREATE TABLE tokens (
    hash       text COLLATE "C" PRIMARY KEY,   -- hex SHA-256 of the token
    actor      text NOT NULL,
    created_at timestamptz NOT NULL
);

-- One row per (actor, request id): the fingerprint of the input the id was
-- first used with and the record that input created. The intent commit
-- inserts this row first (ON CONFLICT DO NOTHING): the primary key is what
-- makes concurrent tries of one id wait for each other.
CREATE TABLE intents (
    actor       text COLLATE "C" NOT NULL,
    request_id  text COLLATE "C" NOT NULL,
    operation   text NOT NULL,
    fingerprint text NOT NULL,
    resource_id text COLLATE "C" NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (actor, request_id)
);

-- Counts are kept on the batch row, changed in the same transaction as the
-- task that moves, so a read of the batch is one row and always consistent.
CREATE TABLE batches (
    id         text COLLATE "C" PRIMARY KEY,
    actor      text COLLATE "C" NOT NULL,
    request_id text NOT NULL,
    prompt     text NOT NULL,
    spec       bytea NOT NULL,                 -- canonical JSON of the normalized input
    task_count integer NOT NULL,
    queued     integer NOT NULL,
    running    integer NOT NULL DEFAULT 0,
    succeeded  integer NOT NULL DEFAULT 0,
    failed     integer NOT NULL DEFAULT 0,
    canceled   integer NOT NULL DEFAULT 0,
    started    boolean NOT NULL DEFAULT false, -- true once any task was claimed
    cancel_requested boolean NOT NULL DEFAULT false, -- running tasks stop at their next step
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX batches_by_actor ON batches (actor, id);

CREATE TABLE tasks (
    id               text COLLATE "C" PRIMARY KEY,
    batch_id         text COLLATE "C" NOT NULL REFERENCES batches (id),
    actor            text COLLATE "C" NOT NULL,
    collection       text NOT NULL,
    frame            text NOT NULL,
    generator        text NOT NULL,
    candidate        integer NOT NULL,
    state            text NOT NULL DEFAULT 'queued',
    attempts         integer NOT NULL DEFAULT 0,
    fence            bigint NOT NULL DEFAULT 0,      -- bumped by every claim
    lease_owner      text,
    lease_expires_at timestamptz,                    -- database clock
    run_after        timestamptz NOT NULL DEFAULT '1970-01-01 00:00:00+00', -- not claimable before (backoff)
    step             text NOT NULL DEFAULT '',       -- last step reached
    provider_ref     text NOT NULL DEFAULT '',       -- the generator's reference
    asset_id         text COLLATE "C",
    error            text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);
CREATE INDEX tasks_by_batch ON tasks (batch_id, id);
CREATE INDEX tasks_by_batch_state ON tasks (batch_id, state, id);

CREATE TABLE assets (
    id           text COLLATE "C" PRIMARY KEY,
    actor        text COLLATE "C" NOT NULL,
    task_id      text COLLATE "C" UNIQUE REFERENCES tasks (id),  -- at most one asset per task
    sha256       text NOT NULL,
    content_type text NOT NULL,
    size         bigint NOT NULL,
    width        integer NOT NULL,
    height       integer NOT NULL,
    created_at   timestamptz NOT NULL
);
CREATE INDEX assets_by_actor ON assets (actor, id);
