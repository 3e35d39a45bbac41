-- aiorest's PostgresIdempotencyStore (aiorest/idempotency.py): one row per Idempotency-Key whose
-- request finished, the response it got, kept until expires_at. Numbered from 2001: aiorest's
-- folders share the negative versions of aiorest_migrations (sessions 0001, ratelimits 1001).
-- A logged table, unlike the rate limits': a row commits in the transaction of the writes it
-- answers for, and must outlive a crash as they do.
CREATE TABLE aiorest_idempotency (
    key text PRIMARY KEY,
    fingerprint text NOT NULL,
    status smallint NOT NULL,
    headers jsonb NOT NULL,
    body bytea NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX aiorest_idempotency_expires_at ON aiorest_idempotency (expires_at);
