-- Workers: what claims and leases need.

-- Graceful releases: a try handed back by a stopping worker still counts in
-- attempts, but not against the maximum (attempts - released is compared).
ALTER TABLE tasks ADD COLUMN released INTEGER NOT NULL DEFAULT 0;

-- A claim finds a batch's first ready tasks through tasks_by_batch_state
-- (batch_id, state, id) of 0001: one index fewer to keep on every move.

-- Running tasks by lease expiry: the claim looks for expired leases first.
CREATE INDEX tasks_leased ON tasks (lease_expires_at) WHERE state = 'running';

-- Batches with queued tasks, least recently touched first: where the
-- claim's round-robin starts.
CREATE INDEX batches_with_queued ON batches (updated_at, id) WHERE queued > 0;

-- Whether any asset names a blob, for the sweep of orphan files.
CREATE INDEX assets_by_sha256 ON assets (sha256);
