-- Live batch events (GET /v1/batches/{id}/events): which transaction last
-- changed what an event shows of each task (state, attempts, asset,
-- error), so a reader, in any instance, can ask "what changed since
-- position N" and miss nothing.
--
-- Transaction ids are not in commit order (a transaction with a smaller id
-- may commit later), so a reader hands out only changes of transactions
-- below its snapshot's xmin (every one of them has ended: committed and
-- visible, or aborted), and its next position is that xmin: an outbox read
-- below the visibility horizon. A per-batch counter row would order the
-- writers too, but it is the hot row migration 0102 took away; a sequence
-- value is taken before commit and breaks the order the same way xids do.
--
-- A trigger stamps the row, so no statement of the write path changes;
-- the column is in no index, so updates stay HOT. A new task starts at 0:
-- its creation is not a change.
ALTER TABLE tasks ADD COLUMN changed_xid xid8 NOT NULL DEFAULT '0';

CREATE FUNCTION tasks_stamp_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;

CREATE TRIGGER tasks_stamp_change BEFORE UPDATE ON tasks FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.attempts IS DISTINCT FROM NEW.attempts
   OR OLD.asset_id IS DISTINCT FROM NEW.asset_id OR OLD.error IS DISTINCT FROM NEW.error)
EXECUTE FUNCTION tasks_stamp_change();
