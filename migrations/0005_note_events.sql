-- The example app's live feed (example_app/live.py): every write of a note, as an event of its owner's.
-- A trigger writes the event and sends the NOTIFY in the write's own transaction: both happen if
-- it commits, neither if it rolls back, and no path that writes a note can forget them.
CREATE TABLE note_events (
    id bigserial PRIMARY KEY,  -- a stream's event id: a reconnecting client resumes after it
    user_id bigint NOT NULL,  -- no foreign key: a user's deletion deletes their notes, whose events it writes
    note_id bigint NOT NULL,
    kind text NOT NULL CHECK (kind IN ('created', 'updated', 'deleted')),
    version integer NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX note_events_user_id ON note_events (user_id, id);

CREATE FUNCTION note_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    note notes;
    event note_events;
BEGIN
    IF TG_OP = 'DELETE' THEN note := OLD; ELSE note := NEW; END IF;
    IF note.owner_id IS NULL THEN  -- a note older than users: nobody's
        RETURN NULL;
    END IF;
    -- One transaction at a time writes a user's events, until it commits: a user's event ids are then
    -- in commit order, and a reader that saw id N never sees a smaller one commit later.
    PERFORM 1 FROM users WHERE id = note.owner_id FOR NO KEY UPDATE;
    INSERT INTO note_events (user_id, note_id, kind, version)
    VALUES (
        note.owner_id, note.id,
        CASE TG_OP WHEN 'INSERT' THEN 'created' WHEN 'UPDATE' THEN 'updated' ELSE 'deleted' END,
        note.version
    )
    RETURNING * INTO event;
    -- Sent at commit, in commit order; a few dozen bytes (PostgreSQL takes up to 8000).
    PERFORM pg_notify('notes', json_build_object(
        'id', event.id, 'user_id', event.user_id, 'note_id', event.note_id,
        'version', event.version, 'kind', event.kind)::text);
    -- Bounded: every 1000th event drops those 100000 events older. A client resuming from before
    -- what is kept is told to resync (example_app/live.py).
    IF event.id % 1000 = 0 THEN
        DELETE FROM note_events WHERE id <= event.id - 100000;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER note_event AFTER INSERT OR UPDATE OR DELETE ON notes
    FOR EACH ROW EXECUTE FUNCTION note_event();
