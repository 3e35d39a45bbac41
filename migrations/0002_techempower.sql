-- The TechEmpower Framework Benchmarks tables, World (ids 1-10000) and Fortune (the
-- 12 published fortunes), as TFB's database image creates them
-- (toolset/databases/postgres/create-postgres.sql; its unquoted World is world here).
-- It adopts a database that has them already, TFB's own included: it creates a table
-- only if missing, and adds only the rows whose ids are missing. A row already there
-- is kept as it is, never overwritten or duplicated.
--
-- This text replaces the first one, which created and filled both tables
-- unconditionally and so failed on TFB's database ("relation world already exists").
-- Where the first text ran, this one would change nothing: the runner counts a
-- database that recorded it as migrated.
-- aiorest:supersedes e4f21882efcb4bd06acfecc3a005ce748bbe8a10b4213b635b7c4b09453d9033
CREATE TABLE IF NOT EXISTS world (
    id integer PRIMARY KEY,
    randomnumber integer NOT NULL DEFAULT 0
);
INSERT INTO world (id, randomnumber)
SELECT x.id, least(floor(random() * 10000 + 1), 10000) FROM generate_series(1, 10000) AS x(id)
WHERE NOT EXISTS (SELECT FROM world WHERE world.id = x.id);

CREATE TABLE IF NOT EXISTS fortune (
    id integer PRIMARY KEY,
    message varchar(2048) NOT NULL
);
INSERT INTO fortune (id, message)
SELECT f.id, f.message FROM (VALUES
    (1, 'fortune: No such file or directory'),
    (2, 'A computer scientist is someone who fixes things that aren''t broken.'),
    (3, 'After enough decimal places, nobody gives a damn.'),
    (4, 'A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1'),
    (5, 'A computer program does what you tell it to do, not what you want it to do.'),
    (6, 'Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen'),
    (7, 'Any program that runs right is obsolete.'),
    (8, 'A list is only as strong as its weakest link. — Donald Knuth'),
    (9, 'Feature: A bug with seniority.'),
    (10, 'Computers make very fast, very accurate mistakes.'),
    (11, '<script>alert("This should not be displayed in a browser alert box.");</script>'),
    (12, 'フレームワークのベンチマーク')
) AS f(id, message)
WHERE NOT EXISTS (SELECT FROM fortune WHERE fortune.id = f.id);
