-- Deleting ended batches (DELETE /v1/batches/{id}, prune): the indexes a
-- deletion needs so that neither it nor its foreign-key checks scan a
-- table. Prune finds old batches by creation time; the batch's
-- publications by batch; the rows that name a deleted asset by asset.
CREATE INDEX batches_by_created ON batches (created_at, id);
CREATE INDEX publications_by_batch ON publications (batch_id);
CREATE INDEX publication_items_by_asset ON publication_items (asset_id);
CREATE INDEX upload_keys_by_asset ON upload_keys (asset_id);
