CREATE TABLE bookmarks (
    id bigserial PRIMARY KEY,
    url text NOT NULL UNIQUE,
    title text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
