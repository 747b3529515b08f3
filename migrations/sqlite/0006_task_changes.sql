-- Live batch events (GET /v1/batches/{id}/events): where each task's last
-- change falls in commit order, so that a reader, in this process or
-- another, can ask "what changed since position N" and miss nothing.
--
-- SQLite has one writer at a time: a counter bumped inside the write
-- transaction is in commit order. A trigger bumps it for every change of
-- what an event shows of a task (state, attempts, asset, error) and stamps
-- the task with it, so no statement of the write path changes. Steps,
-- renewals and other columns do not move it. Tasks are never deleted, so
-- positions only grow. A new task starts at 0: its creation is not a
-- change (the batch read at connect shows it).
CREATE TABLE task_change_clock (n INTEGER NOT NULL);
INSERT INTO task_change_clock (n) VALUES (0);

ALTER TABLE tasks ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER tasks_change_seq AFTER UPDATE OF state, attempts, asset_id, error ON tasks
WHEN OLD.state IS NOT NEW.state OR OLD.attempts IS NOT NEW.attempts
  OR OLD.asset_id IS NOT NEW.asset_id OR OLD.error IS NOT NEW.error
BEGIN
  UPDATE task_change_clock SET n = n + 1;
  UPDATE tasks SET change_seq = (SELECT n FROM task_change_clock) WHERE rowid = NEW.rowid;
END;

-- No index on change_seq: a stream reads its batch's tasks through
-- tasks_by_batch (at most the task limit of rows), and an index would cost
-- every change a write on a page of its own.
