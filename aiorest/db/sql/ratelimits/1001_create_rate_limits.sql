-- aiorest's PostgresLimitStore (aiorest/auth.py): one row per rate limit and key, its count in
-- the window that ends at ends_at. Numbered from 1001: aiorest's folders share the negative
-- versions of aiorest_migrations (sessions has 0001), so each takes its own thousand.
-- UNLOGGED: a count is worth less than a WAL flush on every login attempt (it halved a check's
-- time); after a crash the table is empty, and a standby has none: every count starts afresh.
CREATE UNLOGGED TABLE aiorest_rate_limits (
    name text NOT NULL,
    key text NOT NULL,
    hits integer NOT NULL,
    ends_at timestamptz NOT NULL,
    refused boolean NOT NULL DEFAULT false,
    PRIMARY KEY (name, key)
);
CREATE INDEX aiorest_rate_limits_ends_at ON aiorest_rate_limits (name, ends_at);
