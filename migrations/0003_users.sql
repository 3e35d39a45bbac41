CREATE TABLE users (
    id bigserial PRIMARY KEY,
    username text NOT NULL UNIQUE CHECK (username ~ '^[a-z0-9_.-]{3,32}$'),
    password_hash text NOT NULL,          -- argon2id, argon2-cffi PasswordHasher() defaults (aiorest.auth.hash_password)
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE api_tokens (
    token_hash text PRIMARY KEY,          -- sha256 hex of the token (aiorest.auth.token_hash)
    user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
ALTER TABLE notes ADD COLUMN owner_id bigint REFERENCES users (id) ON DELETE CASCADE;  -- NULL for notes made before: nobody's
CREATE INDEX notes_owner_id ON notes (owner_id, id);
