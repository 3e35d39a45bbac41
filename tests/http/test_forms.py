"""Forms and uploads (issue 36, points 1 and 2), over real sockets.

aiohttp's client sends the well-formed forms (its ``FormData``, as a user's test
would); the malformed ones and those past a limit are written by hand, byte by
byte, since no client library sends them.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import shutil
import subprocess
import tracemalloc
from pathlib import Path

import aiohttp
import pytest

from aiorest import App, FormLimits, Request, Server, UploadFile, Uploads
from tests.rawclient import read_response

BOUNDARY = "aiorestTestBoundary1234"


def multipart_body(
    *parts: tuple[str, bytes, str | None], boundary: str = BOUNDARY, preamble=b"", epilogue=b""
) -> bytes:
    """A multipart/form-data body of (name, value, filename or None) parts."""
    out = [preamble]
    for name, value, filename in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode() + epilogue)
    return b"".join(out)


def raw_post(path: str, body: bytes, content_type: str = f"multipart/form-data; boundary={BOUNDARY}") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def send(port: int, payload: bytes):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        return await read_response(reader, timeout=20)
    finally:
        writer.close()


def describe(value: str | UploadFile) -> object:
    if isinstance(value, str):
        return value
    return {"filename": value.filename, "size": value.size, "type": value.content_type, "memory": value.in_memory}


def forms_app(tmp_path: Path, limits: FormLimits | None = None, **options) -> App:
    app = App(uploads=Uploads(limits, directory=tmp_path), **options)

    @app.post("/form")
    async def form(request: Request) -> dict:
        fields = await request.form()
        out: dict = {key: [describe(value) for value in fields.getall(key)] for key in fields}
        out["_spool_dir"] = sorted(os.listdir(tmp_path))  # anonymous files: never a name on disk
        for upload in fields.files():
            out.setdefault("_sha256", []).append(hashlib.sha256(await upload.read()).hexdigest())
        return out

    @app.post("/upload", max_body_size=64 * 1024 * 1024)
    async def upload(request: Request) -> dict:
        fields = await request.form()
        upload = fields["file"]
        assert isinstance(upload, UploadFile)
        digest = hashlib.sha256()
        async for chunk in upload:
            digest.update(chunk)
        return {"size": upload.size, "sha256": digest.hexdigest(), "memory": upload.in_memory}

    @app.post("/save")
    async def save(request: Request) -> dict:
        upload = (await request.form())["file"]
        assert isinstance(upload, UploadFile)
        target = tmp_path.parent / "saved.bin"
        written = await upload.save(target)
        return {"written": written, "same": target.read_bytes() == await upload.read()}

    @app.post("/raise")
    async def fail(request: Request) -> dict:
        await request.form()
        raise RuntimeError("the handler fails after reading the form")

    return app


async def test_urlencoded_fields_in_order_with_repeats_and_utf8(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path))
    response = await client.post("/form", data=[("a", "1"), ("b", "é x"), ("a", "2"), ("empty", "")])
    assert response.status == 200
    body = await response.json()
    assert body["a"] == ["1", "2"] and body["b"] == ["é x"] and body["empty"] == [""]


async def test_multipart_fields_and_files_small_in_memory_large_on_disk(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path, FormLimits(spool_threshold=256 * 1024)))
    small, large = os.urandom(1000), os.urandom(600_000)
    form = aiohttp.FormData()
    form.add_field("title", "hello ü")
    form.add_field("doc", small, filename="small.txt", content_type="text/plain")
    form.add_field("doc", large, filename="../../etc/passwd")
    response = await client.post("/form", data=form)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["title"] == ["hello ü"]
    first, second = body["doc"]
    assert first == {"filename": "small.txt", "size": 1000, "type": "text/plain", "memory": True}
    assert second["size"] == 600_000 and not second["memory"] and second["type"] == "application/octet-stream"
    assert body["_sha256"] == [hashlib.sha256(small).hexdigest(), hashlib.sha256(large).hexdigest()]
    assert body["_spool_dir"] == []  # the client's file name never became a path, nor did anything else
    uploads = client.app.uploads
    assert uploads.on_disk == uploads.open_files == uploads.in_memory == 0  # closed after the response


async def test_the_memory_of_all_forms_of_a_process_is_bounded(aiorest_client, tmp_path):
    limits = FormLimits(max_process_memory=100_000, max_memory=1024 * 1024)
    client = await aiorest_client(forms_app(tmp_path, limits))
    form = aiohttp.FormData()
    form.add_field("file", io.BytesIO(os.urandom(300_000)), filename="f")  # under spool_threshold, over the budget
    response = await client.post("/form", data=form)
    assert response.status == 200 and (await response.json())["file"][0]["memory"] is False  # spilled at once
    response = await send(client.port, raw_post("/form", multipart_body(("f", b"x" * 150_000, None))))
    assert response.status == 503 and response.header("retry-after") == "1"
    assert "max_process_memory" in response.json()["error"]["message"]
    response = await send(client.port, raw_post("/form", b"f=" + b"x" * 150_000, "application/x-www-form-urlencoded"))
    assert response.status == 503
    uploads = client.app.uploads
    assert uploads.in_memory == uploads.on_disk == uploads.open_files == 0


async def test_a_route_of_its_own_size_streams_a_large_upload_to_disk(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path))  # the server's max_body_size: 1 MiB
    data = os.urandom(20 * 1024 * 1024)
    form = aiohttp.FormData()
    form.add_field("file", io.BytesIO(data), filename="big.bin")
    response = await client.post("/upload", data=form)
    assert response.status == 200, await response.text()
    assert await response.json() == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "memory": False}
    response = await send(client.port, raw_post("/form", multipart_body(("file", data, "big.bin"))))
    assert response.status == 413  # a route without one: the server's limit
    assert client.app.uploads.on_disk == 0 and client.app.uploads.open_files == 0


async def test_a_chunked_upload_to_a_route_of_its_own_size(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path))
    data = os.urandom(3 * 1024 * 1024)
    body = multipart_body(("file", data, "x.bin"))

    async def chunks():
        for start in range(0, len(body), 100_000):
            yield body[start : start + 100_000]

    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    response = await client.post("/upload", data=chunks(), headers=headers)
    assert response.status == 200
    assert (await response.json())["sha256"] == hashlib.sha256(data).hexdigest()


async def test_save_copies_the_file(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path))
    for size in (100, 400_000):  # in memory, then on disk
        form = aiohttp.FormData()
        form.add_field("file", os.urandom(size), filename="f")
        response = await client.post("/save", data=form)
        assert await response.json() == {"written": size, "same": True}


@pytest.mark.parametrize(
    ("limits", "body", "status", "named"),
    [
        (FormLimits(max_parts=3), multipart_body(*[("f", b"v", None)] * 4), 413, "max_parts"),
        (FormLimits(max_fields=2), multipart_body(*[("f", b"v", None)] * 3), 413, "max_fields"),
        (FormLimits(max_files=1), multipart_body(("a", b"1", "a"), ("b", b"2", "b")), 413, "max_files"),
        (FormLimits(max_field_size=10), multipart_body(("f", b"x" * 11, None)), 413, "max_field_size"),
        (FormLimits(max_file_size=10), multipart_body(("f", b"x" * 11, "f.bin")), 413, "max_file_size"),
        (FormLimits(max_memory=100), multipart_body(*[("f", b"x" * 60, None)] * 2), 413, "max_memory"),
        (
            FormLimits(max_preamble=10),
            multipart_body(("f", b"v", None), preamble=b"p" * 200 + b"\r\n"),
            413,
            "max_preamble",
        ),
        (FormLimits(max_boundary=10), multipart_body(("f", b"v", None)), 400, "max_boundary"),
    ],
    ids=lambda value: value if isinstance(value, str) and value.startswith("max_") else "",
)
async def test_each_limit_answers_with_its_name(aiorest_client, tmp_path, limits, body, status, named):
    client = await aiorest_client(forms_app(tmp_path, limits))
    response = await send(client.port, raw_post("/form", body))
    assert response.status == status, response.body
    assert named in response.json()["error"]["message"]
    assert client.app.uploads.on_disk == 0 and client.app.uploads.open_files == 0


async def test_part_header_limits(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path, FormLimits(max_part_headers=2, max_part_header_size=200)))
    many = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="f"\r\nA: 1\r\nB: 2\r\n\r\nv\r\n--{BOUNDARY}--\r\n'
    response = await send(client.port, raw_post("/form", many.encode()))
    assert response.status == 413 and "max_part_headers" in response.json()["error"]["message"]
    long = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{"n" * 300}"\r\n\r\nv\r\n--{BOUNDARY}--\r\n'
    response = await send(client.port, raw_post("/form", long.encode()))
    assert response.status == 413 and "max_part_header_size" in response.json()["error"]["message"]


async def test_the_epilogue_is_bounded(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path, FormLimits(max_epilogue=100)))
    body = multipart_body(("f", b"v", None))
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:  # the body, then an epilogue of 2,000 bytes in a later read
        writer.write(raw_post("/form", body + b"e" * 2000)[:-2000])
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"e" * 2000)
        response = await read_response(reader, timeout=10)
    finally:
        writer.close()
    assert response.status == 413 and "max_epilogue" in response.json()["error"]["message"]
    response = await send(client.port, raw_post("/form", multipart_body(("f", b"v", None), epilogue=b"e" * 50)))
    assert response.status == 200  # a short epilogue is allowed (RFC 2046)


async def test_urlencoded_limits(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path, FormLimits(max_fields=3, max_field_size=5, max_memory=100)))
    urlencoded = "application/x-www-form-urlencoded"
    for body, named in (
        (b"a=1&b=2&c=3&d=4", "max_fields"),
        (b"a=123456", "max_field_size"),
        (b"a=" + b"1" * 200, "max_memory"),
    ):
        response = await send(client.port, raw_post("/form", body, urlencoded))
        assert response.status == 413 and named in response.json()["error"]["message"], body


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"--" + BOUNDARY.encode() + b'\r\nContent-Disposition: form-data; name="f"\r\n\r\nv', None, 400),  # no end
        (b"garbage without a boundary", None, 400),
        (multipart_body(("f", b"\xff\xfe", None)), None, 400),  # a field that is not UTF-8
        (b"a=%ff", "application/x-www-form-urlencoded", 400),
        (b"{}", "application/json", 415),
        (b"x", "multipart/form-data", 400),  # no boundary parameter
    ],
    ids=["unterminated", "no-boundary-in-body", "field-not-utf8", "urlencoded-not-utf8", "json", "no-boundary"],
)
async def test_malformed_forms_get_a_clear_4xx(aiorest_client, tmp_path, body, content_type, status):
    client = await aiorest_client(forms_app(tmp_path))
    response = await send(
        client.port, raw_post("/form", body, content_type or f"multipart/form-data; boundary={BOUNDARY}")
    )
    assert response.status == status, response.body
    assert response.json()["error"]["status"] == status


async def test_a_request_without_a_body_has_an_empty_form(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path))
    response = await client.post("/form")
    assert response.status == 200 and await response.json() == {"_spool_dir": []}


async def test_files_are_closed_when_the_handler_raises(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path))
    form = aiohttp.FormData()
    form.add_field("file", os.urandom(500_000), filename="f")
    response = await client.post("/raise", data=form)
    assert response.status == 500
    assert client.app.uploads.on_disk == 0 and client.app.uploads.open_files == 0


async def test_files_are_closed_when_the_client_goes_mid_upload(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path))
    body = multipart_body(("file", os.urandom(5 * 1024 * 1024), "f"))
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(raw_post("/upload", body)[: 2 * 1024 * 1024])
    await writer.drain()
    for _ in range(100):  # until the server has spilled part of it to disk
        if client.app.uploads.open_files:
            break
        await asyncio.sleep(0.02)
    assert client.app.uploads.open_files == 1 and client.app.uploads.on_disk > 0
    writer.transport.abort()
    for _ in range(100):
        if not client.app.uploads.open_files:
            break
        await asyncio.sleep(0.02)
    assert client.app.uploads.on_disk == 0 and client.app.uploads.open_files == 0


async def test_the_disk_budget_of_the_process_answers_503(aiorest_client, tmp_path):
    app = forms_app(tmp_path, FormLimits(max_disk=1024 * 1024))
    client = await aiorest_client(app)
    body = multipart_body(("file", os.urandom(3 * 1024 * 1024), "f"))
    response = await send(client.port, raw_post("/upload", body))
    assert response.status == 503 and response.header("retry-after") == "1"
    assert "max_disk" in response.json()["error"]["message"]
    assert app.uploads.on_disk == 0 and app.uploads.open_files == 0
    body = multipart_body(("file", os.urandom(500_000), "f"))
    assert (await send(client.port, raw_post("/upload", body))).status == 200  # room again


async def test_a_slow_upload_holds_no_admission_slot(tmp_path):
    """Behind the gate a form on a route of its own size is read, its files spilled, before the slot."""
    app = forms_app(tmp_path)

    @app.get("/ok")
    async def ok(request: Request) -> dict:
        return {"ok": True}

    server = Server(app, host="127.0.0.1", port=0, max_concurrency=1, max_queue=0)
    await server.start()
    try:
        body = multipart_body(("file", os.urandom(3 * 1024 * 1024), "f"))
        payload = raw_post("/upload", body)
        slow = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
        for _, writer in slow:
            writer.write(payload[: 2 * 1024 * 1024])  # and the rest later
        await asyncio.sleep(0.3)
        for _ in range(3):
            response = await send(server.port, b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n")
            assert response.status == 200  # one slot, three uploads under way: none holds it
        for _, writer in slow:
            writer.write(payload[2 * 1024 * 1024 :])
        for reader, writer in slow:
            assert (await read_response(reader, timeout=20)).status == 200
            writer.close()
    finally:
        await server.stop()


async def test_a_large_upload_streams_to_disk_in_bounded_memory(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path))
    data = os.urandom(48 * 1024 * 1024)
    payload = raw_post("/upload", multipart_body(("file", data, "big")))
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    tracemalloc.start()
    try:
        for start in range(0, len(payload), 1024 * 1024):  # the client holds a MiB at a time
            writer.write(payload[start : start + 1024 * 1024])
            await writer.drain()
        response = await read_response(reader, timeout=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        writer.close()
    assert response.status == 200 and response.json()["sha256"] == hashlib.sha256(data).hexdigest()
    assert peak < 8 * 1024 * 1024, peak  # the server's part, with the client's MiB


@pytest.fixture
def small_disk(tmp_path):
    """A file system of 1 MiB (tmpfs), or a skip where this process cannot mount one."""
    where = tmp_path / "small-disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


async def test_a_full_disk_answers_507_and_leaves_nothing(aiorest_client, small_disk):
    app = App(uploads=Uploads(directory=small_disk))

    @app.post("/upload", max_body_size=8 * 1024 * 1024)
    async def upload(request: Request) -> dict:
        return {"size": (await request.form())["file"].size}

    client = await aiorest_client(app)
    response = await send(client.port, raw_post("/upload", multipart_body(("file", os.urandom(3 * 1024 * 1024), "f"))))
    assert response.status == 507 and response.json()["error"]["message"] == "no space left to store the upload"
    assert app.uploads.on_disk == app.uploads.open_files == 0
    assert shutil.disk_usage(small_disk).used == 0  # the anonymous file went with its descriptor
    response = await send(client.port, raw_post("/upload", multipart_body(("file", os.urandom(1000), "f"))))
    assert response.status == 200


async def test_a_server_stop_mid_upload_closes_the_files(tmp_path):
    app = forms_app(tmp_path)
    server = Server(app, host="127.0.0.1", port=0)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = multipart_body(("file", os.urandom(5 * 1024 * 1024), "f"))
    writer.write(raw_post("/upload", body)[: 3 * 1024 * 1024])  # and never the rest
    await writer.drain()
    for _ in range(100):
        if app.uploads.open_files:
            break
        await asyncio.sleep(0.02)
    assert app.uploads.open_files == 1
    await server.stop(timeout=0.5)
    writer.close()
    assert app.uploads.on_disk == app.uploads.open_files == 0


async def test_a_route_of_its_own_smaller_size_refuses_a_larger_body(aiorest_client):
    app = App()

    @app.post("/tiny", max_body_size=10)
    async def tiny(request: Request) -> dict:
        return {"size": len(await request.read())}

    client = await aiorest_client(app)
    head = "POST /tiny HTTP/1.1\r\nHost: t\r\n"
    response = await send(client.port, f"{head}Content-Length: 11\r\n\r\n".encode() + b"x" * 11)
    assert response.status == 413 and "limit of 10" in response.json()["error"]["message"]
    chunked = f"{head}Transfer-Encoding: chunked\r\n\r\n6\r\nxxxxxx\r\n6\r\nxxxxxx\r\n0\r\n\r\n".encode()
    assert (await send(client.port, chunked)).status == 413
    assert (await send(client.port, f"{head}Content-Length: 10\r\n\r\n".encode() + b"x" * 10)).json() == {"size": 10}


async def test_a_control_character_in_a_part_header_is_a_400_not_a_500(aiorest_client, tmp_path):
    client = await aiorest_client(forms_app(tmp_path))
    response = await send(client.port, raw_post("/form", multipart_body(("file", b"x", "a\x1b[31m.txt"))))
    assert response.status == 400 and "part header" in response.json()["error"]["message"]
