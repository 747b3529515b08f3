-- Deleting ended batches (as migrations/sqlite/0011): indexes so that a
-- deletion and its foreign-key checks scan no table.
CREATE INDEX batches_by_created ON batches (created_at, id);
CREATE INDEX publications_by_batch ON publications (batch_id);
CREATE INDEX publication_items_by_asset ON publication_items (asset_id);
CREATE INDEX upload_keys_by_asset ON upload_keys (asset_id);
