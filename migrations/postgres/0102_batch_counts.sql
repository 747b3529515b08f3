-- PostgreSQL's own (no SQLite twin): a batch's counts spread over several
-- rows, so that workers moving tasks of one batch at once do not all wait
-- on its one row (store/postgres/tasks.go, deltas.apply).
--
-- The count columns of batches keep the counts as of creation and of the
-- cancel sweep (CancelBatch holds the batch row anyway). Every other move
-- of a task (claims, completions, failures, releases, expired leases) adds
-- its delta to one row here, in the same transaction as the task: a row no
-- other transaction holds (SKIP LOCKED), else one of at most 8 shards
-- picked at random. A batch's counts are its row's plus the sum of its
-- shards, read in one statement, so they agree with its tasks at every
-- read. A shard's own values may be negative; only sums mean anything.
-- started and updated_at combine the same way (OR, greatest).

CREATE TABLE batch_counts (
    batch_id   text COLLATE "C" NOT NULL REFERENCES batches (id),
    shard      smallint NOT NULL CHECK (shard >= 0 AND shard < 8),
    queued     integer NOT NULL DEFAULT 0,
    running    integer NOT NULL DEFAULT 0,
    succeeded  integer NOT NULL DEFAULT 0,
    failed     integer NOT NULL DEFAULT 0,
    canceled   integer NOT NULL DEFAULT 0,
    started    boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (batch_id, shard)
);

-- With the counts spread, "which batches have queued tasks" is no longer a
-- filter on batch rows: claims find them from the queued tasks themselves,
-- one index probe per such batch (a skip scan of this index), however many
-- batches have ended.
CREATE INDEX tasks_queued ON tasks (batch_id, id) WHERE state = 'queued';
