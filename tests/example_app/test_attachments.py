"""Attachments on notes (example_app/attachments.py) over HTTP, stored in a real PostgreSQL.

Through nginx, with a 32 MiB upload and ranges: tests/deploy/test_nginx.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aiorest.db import Database
from example_app import attachments, create_app
from example_app.attachments import (
    CHUNK_SIZE,
    MAX_BODY,
    ChunkMissing,
    verify_attachment,
)
from example_app.headers import byte_range, content_disposition, display_name, media_type

from .test_example_app import create, log_in, unique


@pytest.fixture(params=["psycopg2", "aiopg"])
async def app(shared_database_url, request):
    """The example app on each database driver (bytea comes back from each in its own way)."""
    return create_app(Database(shared_database_url, min_size=2, max_size=8, driver=request.param))


@pytest.fixture
async def client(aiorest_client, app):
    client = await aiorest_client(app)
    await log_in(client, unique("user"))
    return client


def form(data: bytes | Any, filename: str = "report.bin", content_type: str = "application/octet-stream"):
    payload = aiohttp.FormData()
    if isinstance(data, bytes):
        data = io.BytesIO(data)
    payload.add_field("file", data, filename=filename, content_type=content_type)
    return payload


async def upload(client, note_id: int, data: bytes | Any, expect: int = 201, **options: Any) -> dict:
    headers = options.pop("headers", {})
    async with client.post(f"/notes/{note_id}/attachments", data=form(data, **options), headers=headers) as response:
        assert response.status == expect, await response.text()
        return await response.json()


async def download(client, url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    async with client.get(url, headers=headers or {}) as response:
        body = b"".join([chunk async for chunk in response.content.iter_chunked(1 << 16)])
        return response.status, response.headers, body


def a_file(size: int) -> bytes:
    return os.urandom(size)


async def test_upload_then_download_is_byte_identical_and_checked_after_the_response(client, app):
    note = await create(client)
    data = a_file(5 * 1024 * 1024 + 12345)  # not a whole number of chunks
    attachment = await upload(client, note["id"], data, filename="photo.jpg", content_type="image/jpeg")
    sha = hashlib.sha256(data).hexdigest()
    assert attachment["size"] == len(data) and attachment["sha256"] == sha
    assert attachment["filename"] == "photo.jpg" and attachment["content_type"] == "image/jpeg"
    assert attachment["url"] == f"/notes/{note['id']}/attachments/{attachment['id']}"
    chunks = await app.state.db.fetchval(
        "SELECT count(*) FROM attachment_chunks WHERE attachment_id = %s", (attachment["id"],)
    )
    assert chunks == len(data) // CHUNK_SIZE + 1

    status, headers, body = await download(client, attachment["url"])
    assert status == 200 and hashlib.sha256(body).hexdigest() == sha and len(body) == len(data)
    assert headers["ETag"] == f'"{sha}"' and headers["Content-Type"] == "image/jpeg"
    assert headers["Accept-Ranges"] == "bytes" and headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Disposition"] == "attachment; filename=\"photo.jpg\"; filename*=UTF-8''photo.jpg"

    # The background task read the chunks back from PostgreSQL and found the same SHA-256.
    for _ in range(200):
        async with client.get(f"/notes/{note['id']}/attachments") as response:
            [listed] = await response.json()
        if listed["verified_at"] is not None:
            break
        await asyncio.sleep(0.05)
    assert listed["verified_at"] is not None and listed["id"] == attachment["id"]


async def test_a_stored_chunk_that_differs_is_never_verified(client, app, caplog):
    note = await create(client)
    database = app.state.db
    # A trigger that corrupts the chunks as they are stored: the check after the response must see it.
    name = f"corrupt_{uuid.uuid4().hex[:8]}"
    await database.execute(
        f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" NEW.data := set_byte(NEW.data, 0, 255 - get_byte(NEW.data, 0)); RETURN NEW; END $$"
    )
    trigger = f"CREATE TRIGGER {name} BEFORE INSERT ON attachment_chunks FOR EACH ROW EXECUTE FUNCTION {name}()"
    await database.execute(trigger)
    try:
        attachment = await upload(client, note["id"], b"abc" * 1000)
        for _ in range(100):
            if "do not hash to the SHA-256" in caplog.text:
                break
            await asyncio.sleep(0.05)
    finally:
        await database.execute(f"DROP TRIGGER {name} ON attachment_chunks")
        await database.execute(f"DROP FUNCTION {name}()")
    assert f"attachment {attachment['id']}: the stored chunks do not hash" in caplog.text
    async with client.get(f"/notes/{note['id']}/attachments") as response:
        assert (await response.json())[0]["verified_at"] is None


async def test_ranges_206_416_and_if_range(client):
    note = await create(client)
    data = a_file(3 * CHUNK_SIZE + 100)
    url = (await upload(client, note["id"], data))["url"]
    size = len(data)
    for asked, first, last in [
        ("bytes=0-99", 0, 99),
        (f"bytes={CHUNK_SIZE - 10}-{2 * CHUNK_SIZE + 10}", CHUNK_SIZE - 10, 2 * CHUNK_SIZE + 10),  # three chunks
        ("bytes=-150", size - 150, size - 1),
        (f"bytes={size - 1}-", size - 1, size - 1),
        (f"bytes=5-{size * 2}", 5, size - 1),
    ]:
        status, headers, body = await download(client, url, {"Range": asked})
        assert status == 206, asked
        assert headers["Content-Range"] == f"bytes {first}-{last}/{size}", asked
        assert body == data[first : last + 1], asked
    status, headers, body = await download(client, url, {"Range": f"bytes={size}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{size}"
    assert body.startswith(b'{"error":')
    for whole in ("bytes=0-1,5-9", "items=0-1", "bytes=9-2", "bytes=x-"):
        status, headers, body = await download(client, url, {"Range": whole})
        assert status == 200 and body == data and "Content-Range" not in headers, whole
    status, _, body = await download(client, url, {"Range": "bytes=0-9", "If-Range": '"stale"'})
    assert status == 200 and body == data
    etag = f'"{hashlib.sha256(data).hexdigest()}"'
    status, _, body = await download(client, url, {"Range": "bytes=0-9", "If-Range": etag})
    assert status == 206 and body == data[:10]


async def test_etag_304_412_and_head(client):
    note = await create(client)
    data = a_file(70_000)
    url = (await upload(client, note["id"], data))["url"]
    etag = f'"{hashlib.sha256(data).hexdigest()}"'
    for asked in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        status, headers, body = await download(client, url, {"If-None-Match": asked})
        assert status == 304 and body == b"" and headers["ETag"] == etag, asked
    status, _, body = await download(client, url, {"If-None-Match": '"other"'})
    assert status == 200 and body == data
    status, _, _ = await download(client, url, {"If-Match": '"other"'})
    assert status == 412
    async with client.head(url) as response:
        assert response.status == 200 and response.headers["ETag"] == etag
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert await response.read() == b""
    async with client.head(url, headers={"If-None-Match": etag}) as response:
        assert response.status == 304


async def test_delete_frees_the_quota_and_a_file_past_the_quota_is_413(client, app):
    app.state.attachment_quota = 1_000_000
    note = await create(client)
    first = await upload(client, note["id"], a_file(600_000))
    refused = await upload(client, note["id"], a_file(500_000), expect=413)
    assert refused["error"]["details"] == {"quota": 1_000_000, "used": 600_000, "size": 500_000}
    assert "quota of 1000000 bytes" in refused["error"]["message"]
    async with client.get(f"/notes/{note['id']}/attachments") as response:
        assert [listed["id"] for listed in await response.json()] == [first["id"]]
    async with client.delete(first["url"]) as response:
        assert response.status == 204
    async with client.delete(first["url"]) as response:
        assert response.status == 404
    status, _, _ = await download(client, first["url"])
    assert status == 404
    assert (
        await app.state.db.fetchval("SELECT count(*) FROM attachment_chunks WHERE attachment_id = %s", (first["id"],))
        == 0
    )
    await upload(client, note["id"], a_file(500_000))  # the space is free again
    # Deleting the note takes its attachments with it.
    async with client.delete(f"/notes/{note['id']}") as response:
        assert response.status == 204
    assert await app.state.db.fetchval("SELECT count(*) FROM attachments WHERE note_id = %s", (note["id"],)) == 0


async def test_a_retried_upload_with_its_idempotency_key_is_stored_once(client, app):
    note = await create(client)
    data = a_file(2 * CHUNK_SIZE + 7)
    key = {"Idempotency-Key": str(uuid.uuid4())}
    # Each send encodes the form anew, with another random boundary: the same upload all the same.
    first = await upload(client, note["id"], data, headers=key)
    async with client.post(f"/notes/{note['id']}/attachments", data=form(data), headers=key) as response:
        assert response.status == 201 and response.headers["Idempotent-Replayed"] == "true"
        assert await response.json() == first
    async with client.post(f"/notes/{note['id']}/attachments", data=form(data[:-1]), headers=key) as response:
        assert response.status == 422  # the same key on another file
    stored = await app.state.db.fetchval("SELECT count(*) FROM attachments WHERE note_id = %s", (note["id"],))
    assert stored == 1


async def test_another_users_note_and_attachment_are_404(client):
    note = await create(client)
    attachment = await upload(client, note["id"], b"mine")
    client.session.cookie_jar.clear()
    async with client.get(attachment["url"]) as response:
        assert response.status == 401
    await log_in(client, unique("user"))  # another user, on the same client
    await upload(client, note["id"], b"theirs", expect=404)
    for method, url in [
        ("GET", attachment["url"]),
        ("HEAD", attachment["url"]),
        ("GET", f"/notes/{note['id']}/attachments"),
        ("DELETE", attachment["url"]),
        ("GET", f"/notes/{note['id']}/attachments/999999999"),
        ("GET", f"/notes/{note['id']}/attachments/{2**63}"),
    ]:
        async with client.request(method, url) as response:
            assert response.status == 404, (method, url)


def raw_form(filename: str, content_type: str, data: bytes) -> tuple[bytes, dict[str, str]]:
    """A form encoded by hand: aiohttp refuses the control characters a hostile client sends."""
    body = (
        (
            f'--b0undary\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            f"Content-Type: {content_type}\r\n\r\n"
        ).encode()
        + data
        + b"\r\n--b0undary--\r\n"
    )
    return body, {"Content-Type": "multipart/form-data; boundary=b0undary"}


async def test_a_form_without_a_file_is_422_and_names_are_made_safe(client):
    note = await create(client)
    async with client.post(f"/notes/{note['id']}/attachments", data={"title": "no file"}) as response:
        assert response.status == 422
        [problem] = (await response.json())["error"]["details"]
        assert problem["location"] == "form.file"
    body, content_type = raw_form("C:\\Users\\me\\résumé 'v2'.pdf", "text/html; x=1", b"%PDF")
    async with client.post(f"/notes/{note['id']}/attachments", data=body, headers=content_type) as response:
        attachment = await response.json()
        assert response.status == 201, attachment
    assert attachment["filename"] == "résumé 'v2'.pdf" and attachment["content_type"] == "text/html"
    _, headers, _ = await download(client, attachment["url"])
    assert headers["Content-Disposition"] == (
        "attachment; filename=\"r_sum_ 'v2'.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%27v2%27.pdf"
    )
    # An empty part without a file name is a file input left empty: no file (typed forms' rule).
    await upload(client, note["id"], b"", filename="", expect=422)
    empty = await upload(client, note["id"], b"", filename="empty.txt")
    assert empty["size"] == 0 and empty["filename"] == "empty.txt"
    status, _, body = await download(client, empty["url"])
    assert status == 200 and body == b""
    status, _, _ = await download(client, empty["url"], {"Range": "bytes=0-"})
    assert status == 416


def test_the_header_helpers():
    assert byte_range("bytes=0-0", 10) == (0, 0)
    assert byte_range("bytes=-0", 10) == "unsatisfiable"
    assert byte_range("bytes=-20", 10) == (0, 9)
    assert byte_range("bytes= 3 - 4 ", 10) == (3, 4)
    assert byte_range("bytes=10-", 10) == "unsatisfiable"
    assert byte_range("bytes=-", 10) is None and byte_range("bytes=٣-4", 10) is None
    assert display_name("../../etc/passwd") == "passwd" and display_name(None) == display_name("") == "attachment"
    assert display_name("x" * 300) == "x" * 255 and display_name("a\x1b[31m\x07b.txt") == "a[31mb.txt"
    assert media_type("Image/PNG") == "image/png" and media_type("nonsense") == "application/octet-stream"
    assert content_disposition("100%.txt") == "attachment; filename=\"100_.txt\"; filename*=UTF-8''100%25.txt"
    assert content_disposition('say "hi"\\.txt') == (
        "attachment; filename=\"say _hi__.txt\"; filename*=UTF-8''say%20%22hi%22%5C.txt"
    )


async def test_a_32_mib_file_goes_through_with_memory_bounded(client, tmp_path: Path):
    note = await create(client)
    path = tmp_path / "big.bin"
    size = 32 * 1024 * 1024
    digest = hashlib.sha256()
    with path.open("wb") as file:
        for _ in range(size // (1 << 20)):
            block = os.urandom(1 << 20)
            digest.update(block)
            file.write(block)
    tracemalloc.start()
    try:
        with path.open("rb") as file:
            # With a key: the idempotency middleware's fingerprint reads the file too, from disk.
            key = {"Idempotency-Key": str(uuid.uuid4())}
            attachment = await upload(client, note["id"], file, filename="big.bin", headers=key)
        downloaded = hashlib.sha256()
        async with client.get(attachment["url"]) as response:
            assert response.status == 200
            async for chunk in response.content.iter_chunked(1 << 16):
                downloaded.update(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert attachment["sha256"] == digest.hexdigest() == downloaded.hexdigest()
    # Client and server in this process, the upload spooled to disk and streamed to PostgreSQL
    # and back a chunk at a time: the peak is a few chunks (about 2 MiB), not the file.
    assert peak < 4 * 1024 * 1024, peak


async def test_a_part_header_with_a_control_character_is_400(client):
    note = await create(client)
    body, content_type = raw_form("a\x1b[31m.txt", "text/plain", b"x")
    async with client.post(f"/notes/{note['id']}/attachments", data=body, headers=content_type) as response:
        assert response.status == 400


async def test_the_openapi_document_lists_the_attachment_routes(client):
    async with client.get("/openapi.json") as response:
        document = await response.json()
    upload = document["paths"]["/notes/{note_id}/attachments"]["post"]
    assert {"201", "401", "413", "422"} <= set(upload["responses"])
    [(media_type, content)] = upload["requestBody"]["content"].items()
    assert media_type == "multipart/form-data" and "file" in str(content) and "binary" in str(content)
    assert "Attachment" in str(upload["responses"]["201"])
    download = document["paths"]["/notes/{note_id}/attachments/{attachment_id}"]
    assert {"304", "416"} <= set(download["get"]["responses"]) and "delete" in download


async def test_two_uploads_at_once_cannot_both_take_the_last_of_the_quota(client, app):
    app.state.attachment_quota = 1_000_000
    note = await create(client)

    async def send() -> int:
        url = f"/notes/{note['id']}/attachments"
        async with client.post(url, data=form(a_file(600_000))) as response:
            return response.status

    assert sorted(await asyncio.gather(send(), send())) == [201, 413]


async def test_a_body_past_the_routes_limit_is_413_before_it_is_read(client):
    note = await create(client)
    path = f"/notes/{note['id']}/attachments"
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
            f"Content-Length: {MAX_BODY + 1}\r\n\r\n".encode()
        )
        status = await reader.readline()
    finally:
        writer.close()
    assert status.split()[1] == b"413"


async def test_an_upload_past_the_quota_by_its_length_is_refused_before_its_body_is_sent(client, app):
    app.state.attachment_quota = 1_000_000
    note = await create(client)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        cookies = "; ".join(f"{cookie.key}={cookie.value}" for cookie in client.session.cookie_jar)
        writer.write(
            f"POST /notes/{note['id']}/attachments HTTP/1.1\r\nHost: x\r\nCookie: {cookies}\r\n"
            "Content-Type: multipart/form-data; boundary=b\r\nExpect: 100-continue\r\n"
            f"Content-Length: {1_000_001 + 1024 * 1024}\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 413 ")  # no 100 Continue first: the client sends no byte of the file


async def test_a_download_cut_by_a_delete_ends_incomplete_and_the_check_lets_it_go(client, app):
    note = await create(client)
    data = a_file(24 * 1024 * 1024)
    attachment = await upload(client, note["id"], data)
    received = 0
    with pytest.raises(aiohttp.ClientPayloadError):
        async with client.get(attachment["url"]) as response:
            assert response.status == 200
            received += len(await response.content.readexactly(1 << 16))
            async with client.delete(attachment["url"]) as deleted:
                assert deleted.status == 204
            async for chunk in response.content.iter_chunked(1 << 16):
                received += len(chunk)
    assert received < len(data)  # the chunks still to read were gone: never a short body taken as whole
    await verify_attachment(app.state.db, attachment["id"])  # deleted: nothing to check, no error

    kept = await upload(client, note["id"], a_file(3 * CHUNK_SIZE))
    await app.state.db.execute("DELETE FROM attachment_chunks WHERE attachment_id = %s AND seq = 1", (kept["id"],))
    with pytest.raises(ChunkMissing):  # lost while the attachment is there: an error, logged by the task
        await verify_attachment(app.state.db, kept["id"])


async def test_a_note_holds_a_bounded_number_of_attachments(client, monkeypatch):
    monkeypatch.setattr(attachments, "MAX_PER_NOTE", 2)
    note = await create(client)
    for _ in range(2):
        await upload(client, note["id"], b"x")
    refused = await upload(client, note["id"], b"x", expect=409)
    assert refused["error"]["details"] == {"max_per_note": 2}
    async with client.get(f"/notes/{note['id']}/attachments") as response:
        assert len(await response.json()) == 2
