-- PostgreSQL's own (no SQLite twin): asset bytes in the database, for
-- studio processes that share no disk (store/postgres/blobstore.go). One
-- row per distinct SHA-256, however many assets name it.

CREATE TABLE blobs (
    sha256     text COLLATE "C" PRIMARY KEY,  -- 64 lowercase hex digits
    size       bigint NOT NULL,
    data       bytea NOT NULL,
    touched_at timestamptz NOT NULL           -- written or reused: a sweep keeps it a while
);
-- Images are compressed already: keep them out of line without trying to
-- compress them again.
ALTER TABLE blobs ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX blobs_by_touch ON blobs (touched_at);
