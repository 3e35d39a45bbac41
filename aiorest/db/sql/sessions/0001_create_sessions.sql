-- aiorest's PostgresStore (aiorest/sessions.py): one row per session, its keys in a jsonb object.
CREATE TABLE aiorest_sessions (
    id text PRIMARY KEY,
    data jsonb NOT NULL DEFAULT '{}',
    expires_at timestamptz NOT NULL
);
CREATE INDEX aiorest_sessions_expires_at ON aiorest_sessions (expires_at);
