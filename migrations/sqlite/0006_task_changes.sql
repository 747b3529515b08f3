-- Live batch events (GET /v1/batches/{id}/events): where each task's last
-- change falls in commit order, so that a reader, in this process or
-- another, can ask "what changed since position N" and miss nothing.
--
-- Every statement of store/sqlite that changes what an event shows of a
-- task (state, attempts, asset, error) sets change_seq to one above
-- task_change_clock (one column more in each UPDATE), and the trigger
-- below moves the clock up to it: a statement's rows share one value, the
-- next statement's are above it. SQLite has one writer at a time, so the
-- values are in commit order, and a reader whose snapshot shows the clock
-- at N has every change up to N. Steps, renewals and other columns do not
-- move it. Tasks are never deleted, so positions only grow. A new task
-- starts at 0: its creation is not a change (the batch read at connect
-- shows it).
--
-- (A trigger that stamped each changed row itself cost the drain a
-- clock update and a second write of the row per change; this one writes
-- the clock once per statement and only reads it for the other rows.)
CREATE TABLE task_change_clock (n INTEGER NOT NULL);
INSERT INTO task_change_clock (n) VALUES (0);

ALTER TABLE tasks ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0;

CREATE TRIGGER task_change_clock_up AFTER UPDATE OF change_seq ON tasks
WHEN NEW.change_seq > OLD.change_seq
BEGIN
  UPDATE task_change_clock SET n = NEW.change_seq WHERE n < NEW.change_seq;
END;

-- No index on change_seq: a stream reads its batch's tasks through an
-- index on batch_id (tasks_by_batch_state since 0007 dropped
-- tasks_by_batch; at most the task limit of rows), and an index would
-- cost every change a write on a page of its own. (A comment only: the
-- statements of this file are as they shipped.)
