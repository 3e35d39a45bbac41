-- The example app's users, their API tokens, and notes owned by their user.
-- Sessions live in aiorest's own table: aiorest migrate --dir aiorest:sessions.
CREATE TABLE users (
    id bigserial PRIMARY KEY,
    username text NOT NULL UNIQUE CHECK (username ~ '^[a-z0-9_.-]{3,32}$'),
    password_hash text NOT NULL,  -- argon2id (argon2-cffi), salt and parameters included
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE api_tokens (
    token_hash text PRIMARY KEY,  -- SHA-256 of the token, in hex: a leaked table gives no usable token
    user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX api_tokens_user_id ON api_tokens (user_id);
-- Notes made before this migration have no owner: nobody can read them.
ALTER TABLE notes ADD COLUMN owner_id bigint REFERENCES users (id) ON DELETE CASCADE;
CREATE INDEX notes_owner_id ON notes (owner_id, id);
