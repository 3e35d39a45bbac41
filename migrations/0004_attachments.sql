-- Files attached to notes, kept in PostgreSQL itself so that every host of a cluster
-- serves every attachment (no file system to share or replicate), in chunks of
-- at most 256 KiB: a file streams in and out a chunk at a time, never whole in memory.
CREATE TABLE attachments (
    id bigserial PRIMARY KEY,
    note_id bigint NOT NULL REFERENCES notes (id) ON DELETE CASCADE,
    -- The note's owner, copied: the per-user quota sums sizes by it.
    owner_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    filename text NOT NULL CHECK (length(filename) BETWEEN 1 AND 255),  -- shown, never a path
    content_type text NOT NULL CHECK (length(content_type) BETWEEN 3 AND 127),
    size bigint NOT NULL CHECK (size >= 0),
    chunk_size integer NOT NULL CHECK (chunk_size > 0),
    -- Set by the upload's transaction once every chunk is in: NULL is never committed.
    sha256 bytea CHECK (length(sha256) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- When a check after the upload read the chunks back and found the same SHA-256.
    verified_at timestamptz
);
CREATE INDEX attachments_note_id ON attachments (note_id, id);
CREATE INDEX attachments_owner_id ON attachments (owner_id);

CREATE TABLE attachment_chunks (
    attachment_id bigint NOT NULL REFERENCES attachments (id) ON DELETE CASCADE,
    seq integer NOT NULL CHECK (seq >= 0),
    data bytea NOT NULL,
    PRIMARY KEY (attachment_id, seq)
);
-- Out of line and uncompressed: most uploads are compressed already, and substring()
-- of an uncompressed value reads only the TOAST pieces it needs (a Range request).
ALTER TABLE attachment_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
