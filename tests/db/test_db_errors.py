"""Database errors as answers: what the client's input caused is a 4xx naming the input, never the
schema; what the code caused is a bare 500, logged in full.
"""

from __future__ import annotations

import logging
import uuid

import psycopg2
import pytest

from aiorest import App, Request
from aiorest.db import ConstraintViolation, Database, InvalidValue, NulCharacter, UniqueViolation
from example_app import create_app

NUL_MESSAGE = "holds a NUL character (U+0000), which the database cannot store"


@pytest.fixture
async def db(database_url):
    database = Database(database_url, min_size=1, max_size=1)
    await database.open()
    await database.execute("CREATE TABLE notes (id int PRIMARY KEY, title varchar(10) NOT NULL, tags text[])")
    yield database
    await database.close()


async def _nul_location(db_or_tx, sql: str, params) -> str:
    with pytest.raises(NulCharacter) as refused:
        await db_or_tx.execute(sql, params)
    assert refused.value.status == 422 and refused.value.message == "the request is not valid"
    [problem] = refused.value.details
    assert problem["message"] == NUL_MESSAGE
    location: str = problem["location"]
    return location


@pytest.mark.parametrize("prepare", [True, False])
async def test_a_nul_in_a_parameter_is_a_422_naming_it_on_every_path(database_url, prepare):
    db = Database(database_url, min_size=1, max_size=1, prepare=prepare)
    await db.open()
    try:
        await db.execute("CREATE TABLE notes (id int PRIMARY KEY, title text, tags text[])")
        pid = await db.fetchval("SELECT pg_backend_pid()")
        insert = "INSERT INTO notes VALUES (%s, %s, %s)"
        assert await _nul_location(db, insert, (1, "nul\x00here", None)) == "parameter 2"
        assert await _nul_location(db, insert, (1, "ok", ["a", "b\x00"])) == "parameter 3"  # inside a list
        assert await _nul_location(db, "SELECT %(title)s", {"title": "\x00"}) == "parameter title"
        async with db.transaction():
            await db.execute(insert, (1, "kept", None))
            assert await _nul_location(db, insert, (2, "\x00", None)) == "parameter 2"
            # Nothing was sent: the transaction goes on, unharmed.
            await db.execute(insert, (3, "kept too", None))
        async with db.connection() as conn:
            assert await _nul_location(conn, "SELECT %s", ("\x00",)) == "parameter 1"
        assert await db.fetchval("SELECT count(*) FROM notes") == 2
        # The one connection was neither marked broken nor replaced.
        assert await db.fetchval("SELECT pg_backend_pid()") == pid and db.size == 1
    finally:
        await db.close()


async def test_a_nul_in_json_for_jsonb_is_a_422(db):
    with pytest.raises(InvalidValue) as refused:
        await db.fetchval("SELECT %s::jsonb", (psycopg2.extras.Json({"a": "\x00"}),))
    assert refused.value.status == 422 and refused.value.sqlstate == "22P05"


@pytest.fixture
async def notes_client(aiorest_client, db):
    app = App()
    db.setup(app)

    @app.post("/notes/{id:int}")
    async def create(request: Request):
        body = await request.json()
        await db.execute("INSERT INTO notes VALUES (%s, %s)", (request.path_params["id"], body["title"]))
        return {"ok": True}

    @app.get("/ratio/{a:int}/{b:int}")
    async def ratio(request: Request):
        return {"ratio": await db.fetchval("SELECT %s / %s", (request.path_params["a"], request.path_params["b"]))}

    return await aiorest_client(app)


async def test_a_value_too_long_is_a_422_naming_no_table_column_or_constraint(notes_client, db):
    async with notes_client.post("/notes/1", json={"title": "far too long a title"}) as response:
        assert response.status == 422
        body = await response.json()
    # The shape of every 422 (see aiorest.typed); PostgreSQL does not say which input it was.
    problem = {"location": "request", "message": "a value is too long"}
    assert body == {"error": {"status": 422, "message": "the request is not valid", "details": [problem]}}
    async with notes_client.post("/notes/1", json={"title": None}) as response:
        assert response.status == 422
        problem = {"location": "request", "message": "the data breaks a database constraint"}
        assert (await response.json())["error"]["details"] == [problem]


async def test_a_unique_violation_is_a_409_without_the_constraint_name(notes_client):
    async with notes_client.post("/notes/1", json={"title": "first"}) as response:
        assert response.status == 200
    async with notes_client.post("/notes/1", json={"title": "again"}) as response:
        assert response.status == 409
        text = await response.text()
    assert "notes_pkey" not in text and "notes" not in text.replace("/notes", "")
    assert (await response.json())["error"] == {
        "status": 409,
        "message": "conflict with an existing row",
        "details": None,
    }


async def test_the_exceptions_keep_what_postgresql_said_for_the_app(db):
    await db.execute("INSERT INTO notes VALUES (1, 'a')")
    with pytest.raises(UniqueViolation) as unique:
        await db.execute("INSERT INTO notes VALUES (1, 'a')")
    assert unique.value.constraint == "notes_pkey" and unique.value.sqlstate == "23505"
    assert "notes_pkey" in unique.value.diagnostic
    with pytest.raises(ConstraintViolation) as too_long:
        await db.execute("INSERT INTO notes VALUES (2, %s)", ("x" * 11,))
    assert too_long.value.sqlstate == "22001" and "character varying(10)" in too_long.value.diagnostic
    assert isinstance(too_long.value.__cause__, psycopg2.errors.StringDataRightTruncation)


async def test_a_division_by_zero_is_the_codes_fault_a_500_logged_in_full(notes_client, caplog):
    caplog.set_level(logging.ERROR, logger="aiorest")
    async with notes_client.get("/ratio/6/3") as response:
        assert response.status == 200 and await response.json() == {"ratio": 2}
    async with notes_client.get("/ratio/1/0") as response:
        assert response.status == 500
        assert await response.json() == {"error": {"status": 500, "message": "Internal Server Error", "details": None}}
    [record] = [record for record in caplog.records if record.exc_info]
    logged = caplog.text
    assert "DivisionByZero" in logged and "division by zero" in logged
    assert "SQLSTATE 22012 in the statement: SELECT %s / %s" in logged


@pytest.mark.parametrize("mode", ["prepared", "pgbouncer-transaction"])
async def test_the_example_app_answers_a_nul_in_each_input_with_a_422_naming_it(
    aiorest_client, shared_database_url, mode
):
    options = {"prepare": True} if mode == "prepared" else {"pooler": "transaction"}
    client = await aiorest_client(create_app(Database(shared_database_url, min_size=1, max_size=4, **options)))
    username = f"nul-{uuid.uuid4().hex[:10]}"
    credentials = {"username": username, "password": "correct horse battery"}
    async with client.post("/users", json=credentials) as response:
        assert response.status == 201, await response.text()
    async with client.post("/login", json={**credentials, "username": "nul\x00here"}) as response:
        assert response.status == 422, await response.text()
        assert (await response.json())["error"]["details"] == [{"location": "body.username", "message": NUL_MESSAGE}]
    async with client.post("/login", json=credentials) as response:
        assert response.status == 200, await response.text()
    async with client.post("/notes", json={"title": "nul\x00here"}) as response:
        assert response.status == 422, await response.text()
        assert (await response.json())["error"]["details"] == [{"location": "body.title", "message": NUL_MESSAGE}]
    async with client.get("/notes?q=a%00b") as response:
        assert response.status == 422, await response.text()
        assert (await response.json())["error"]["details"] == [{"location": "query.q", "message": NUL_MESSAGE}]
    async with client.get("/notes?q=ab") as response:
        assert response.status == 200
