-- Fewer indexes to write on every commit. tasks_by_batch (batch_id, id)
-- duplicated tasks_by_batch_state (batch_id, state, id) for every use but
-- the unfiltered task listing, which now merges one ordered range of
-- tasks_by_batch_state per state (store/sqlite ListTasks) instead. Each new
-- task row entered four b-trees (the table, its id key, both batch
-- indexes); now three, which makes a 600-task commit about a third
-- cheaper. Converting an existing database is this one statement.
DROP INDEX IF EXISTS tasks_by_batch;
