"""Request ids and the access log, over real sockets and a real ``aiorest run``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import select
import signal
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

import aiorest
from aiorest import App, Limits, Request, Response, Server, StreamResponse
from aiorest.http.requestid import request_id
from aiorest.ops.accesslog import AccessLog
from aiorest.server.shared import ServerState
from aiorest.server.writing import short_answer
from harness.ports import free_port
from tests.cli.test_cli import python, running, wait_until_accepting
from tests.rawclient import fetch, get, read_response

MADE = re.compile(r"[0-9a-f]{12}-[0-9a-f]+")
handler_log = logging.getLogger("tests.accesslog.handler")


def make_app() -> App:
    app = App()

    @app.get("/json")
    async def hello(request: Request) -> dict[str, Any]:
        handler_log.warning("handling")
        seen: list[str | None] = []

        async def later() -> None:
            await asyncio.sleep(0)
            seen.append(request_id())

        await asyncio.create_task(later())  # a task the handler starts sees the id too
        return {"id": request.id, "current": aiorest.request_id(), "in_task": seen[0]}

    @app.get("/notes/{note_id:int}")
    async def note(request: Request) -> dict[str, int]:
        return {"id": request.path_params["note_id"]}

    @app.get("/boom")
    async def boom(request: Request) -> None:
        raise RuntimeError("boom")

    @app.get("/stream")
    async def stream(request: Request) -> StreamResponse:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"abc"
            yield b"defg"

        return StreamResponse(chunks(), media_type="text/plain")

    return app


app = make_app()


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Server]:
    server = Server(make_app(), port=0, **options)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


# -- request ids -------------------------------------------------------------------------


async def test_an_id_is_made_returned_and_seen_by_the_handler_its_tasks_and_its_logs(caplog):
    caplog.set_level(logging.WARNING, logger="tests.accesslog.handler")
    async with serving() as server:
        first, second = await fetch(server.port, get("/json") + get("/json"), count=2)
    ids = [response.header("x-request-id") for response in (first, second)]
    assert all(MADE.fullmatch(value or "") for value in ids), ids
    assert ids[0] != ids[1]
    for response, value in zip((first, second), ids, strict=True):
        assert json.loads(response.body) == {"id": value, "current": value, "in_task": value}
    assert [record.request_id for record in caplog.records if record.name == handler_log.name] == ids
    assert request_id() is None
    assert logging.LogRecord("x", logging.INFO, "", 0, "m", None, None).__dict__.get("request_id") is None
    assert logging.getLogger("x").makeRecord("x", logging.INFO, "", 0, "m", None, None).request_id == "-"


async def test_errors_streams_and_aiorests_own_error_log_carry_the_id(caplog):
    async with serving(limits=Limits(max_body_size=10)) as server:
        boom, streamed = await fetch(server.port, get("/boom") + get("/stream"), count=2)
        (too_big,) = await fetch(server.port, b"POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 99\r\n\r\n")
        (missing,) = await fetch(server.port, get("/nowhere"))
    assert boom.status == 500 and streamed.body == b"abcdefg" and too_big.status == 413 and missing.status == 404
    for response in (boom, streamed, too_big, missing):
        assert MADE.fullmatch(response.header("x-request-id") or ""), response
    [error] = [record for record in caplog.records if "unhandled exception" in record.getMessage()]
    assert error.request_id == boom.header("x-request-id")


async def test_an_id_from_a_trusted_proxy_is_kept_a_bad_or_untrusted_one_replaced():
    async with serving(forwarded_allow_ips="127.0.0.1") as server:
        (kept,) = await fetch(server.port, get("/json", "X-Request-ID: nginx-3f9a.01_b"))
        assert kept.header("x-request-id") == "nginx-3f9a.01_b"
        assert json.loads(kept.body)["current"] == "nginx-3f9a.01_b"
        for bad in ("a" * 129, "a b", "x;y", "é", ""):
            (replaced,) = await fetch(server.port, get("/json", f"X-Request-ID: {bad}"))
            assert MADE.fullmatch(replaced.header("x-request-id") or ""), bad
        (two,) = await fetch(server.port, get("/json", "X-Request-ID: a", "X-Request-ID: b"))
        assert MADE.fullmatch(two.header("x-request-id") or "")
        (longest,) = await fetch(server.port, get("/json", "X-Request-ID: " + "z" * 128))
        assert longest.header("x-request-id") == "z" * 128
    async with serving(forwarded_allow_ips="10.0.0.0/8") as server:
        (untrusted,) = await fetch(server.port, get("/json", "X-Request-ID: spoofed"))
        assert MADE.fullmatch(untrusted.header("x-request-id") or "")


def test_a_forked_worker_makes_ids_of_its_own():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its prefix and the short answers it writes, and leave at once
        state = ServerState()
        answers = [short_answer({}, state, lambda _: b"{}", 10), short_answer(Response(b"x"), state, bytes, 11)]
        os.write(write, b"\0".join([aiorest.http.requestid.prefix, *answers]))  # type: ignore[list-item]
        os._exit(0)
    os.close(write)
    try:
        child = os.read(read, 10_000)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    prefix, *answers = child.split(b"\0")
    assert prefix and prefix != aiorest.http.requestid.prefix
    assert [re.findall(rb"X-Request-ID: (\S+)\r", answer) for answer in answers] == [[prefix + b"a"], [prefix + b"b"]]


# -- the access log ----------------------------------------------------------------------------

COMBINED = re.compile(
    r'(?P<remote>\S+) - - \[(?P<time>[^]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}) (?P<bytes>\d+) '
    r'"(?P<referer>[^"]*)" "(?P<agent>[^"]*)" (?P<duration>\d+\.\d{6}) "(?P<route>[^"]*)" (?P<id>\S+)'
)


async def access_log_run(*options: str, env: dict[str, str] | None = None) -> tuple[list[Any], bytes]:
    """Serve this module's app with ``options``, send three requests, stop; the responses and stdout."""
    port = free_port()
    process = await python(
        "-m", "aiorest", "run", "tests.ops.test_accesslog:app", "--port", str(port), "--log-level", "warning",
        *options, env=env,
    )  # fmt: skip
    async with running(process):
        await wait_until_accepting(process, port)
        responses = await fetch(
            port,
            get("/json", "User-Agent: probe/1.0", "Referer: http://ref.example/a")
            + get("/notes/42?x=1")
            + get("/stream"),
            count=3,
        )
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            stdout, _ = await process.communicate()
        assert process.returncode == 0
    return responses, stdout


async def test_the_combined_format_from_a_real_server(tmp_path):
    path = tmp_path / "access.log"
    responses, _ = await access_log_run("--access-log", str(path))
    lines = path.read_text().splitlines()
    assert len(lines) == 3, lines
    found = [COMBINED.fullmatch(line) for line in lines]
    assert all(found), lines
    json_line, note_line, stream_line = (match.groupdict() for match in found)  # type: ignore[union-attr]
    assert json_line["request"] == "GET /json HTTP/1.1"
    assert json_line["status"] == "200" and int(json_line["bytes"]) == len(responses[0].body)
    assert json_line["agent"] == "probe/1.0" and json_line["referer"] == "http://ref.example/a"
    assert json_line["route"] == "/json" and json_line["remote"] == "127.0.0.1"
    assert 0 < float(json_line["duration"]) < 5
    assert note_line["request"] == "GET /notes/42?x=1 HTTP/1.1" and note_line["route"] == "/notes/{note_id:int}"
    assert stream_line["bytes"] == "7" and stream_line["agent"] == "-"
    assert [line["id"] for line in (json_line, note_line, stream_line)] == [
        response.header("x-request-id") for response in responses
    ]
    assert re.fullmatch(r"\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000", json_line["time"])


async def test_an_accepted_websocket_has_its_line_with_101(tmp_path):
    app = App()

    @app.websocket("/ws/{room}")
    async def ws(socket: aiorest.WebSocket) -> None:
        await socket.accept()
        await socket.send_text(await socket.receive_text())

    path = tmp_path / "access.log"
    server = Server(app, port=0, access_log=str(path))
    await server.start()
    try:
        async with aiohttp.ClientSession() as client:
            async with client.ws_connect(f"http://127.0.0.1:{server.port}/ws/lobby") as socket:
                await socket.send_str("hi")
                assert (await socket.receive_str()) == "hi"
    finally:
        await server.stop()
    [line] = [COMBINED.fullmatch(text) for text in path.read_text().splitlines()]
    assert line is not None and line["request"] == "GET /ws/lobby HTTP/1.1" and line["status"] == "101"
    assert line["route"] == "/ws/{room}" and line["bytes"] == "0"


async def test_json_lines_on_stdout_chosen_by_environment_variables():
    env = dict(os.environ, AIOREST_ACCESS_LOG="-", AIOREST_ACCESS_LOG_FORMAT="json")
    responses, stdout = await access_log_run(env=env)
    records = [json.loads(line) for line in stdout.decode().splitlines()]
    assert [record["route"] for record in records] == ["/json", "/notes/{note_id:int}", "/stream"]
    first = records[0]
    assert first["status"] == 200 and first["bytes"] == len(responses[0].body) and first["method"] == "GET"
    assert first["target"] == "/json" and first["remote"] == "127.0.0.1" and first["user_agent"] == "probe/1.0"
    assert first["request_id"] == responses[0].header("x-request-id")
    assert 0 < first["duration"] < 5 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert records[1]["target"] == "/notes/42?x=1" and records[2]["bytes"] == 7


async def test_a_forged_quote_tab_or_byte_cannot_break_a_line(tmp_path):
    path = tmp_path / "access.log"
    server = Server(make_app(), port=0, access_log=str(path))
    await server.start()
    try:
        forged = 'x" 200 1 "-" "evil\t\\'
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /json?q=%22%0A HTTP/1.1\r\nHost: t\r\nUser-Agent: " + forged.encode() + b"\xff\r\n\r\n")
        assert (await read_response(reader)).status == 200
        writer.close()
    finally:
        await server.stop()
    (line,) = path.read_text().splitlines()
    match = COMBINED.fullmatch(line)
    assert match is not None, line
    assert match["agent"] == r"x\x22 200 1 \x22-\x22 \x22evil\x09\x5C\xFF"
    assert match["request"] == "GET /json?q=%22%0A HTTP/1.1"


async def test_a_full_queue_drops_and_counts_records_and_never_blocks_the_loop(tmp_path, caplog):
    fifo = tmp_path / "slow-reader"
    os.mkfifo(fifo)
    reader_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # opened, never read: the pipe fills up
    server = Server(make_app(), port=0, access_log=str(fifo))
    assert server.access_log is not None
    server.access_log.queue_size = 50
    await server.start()
    lag = 0.0

    async def heartbeat() -> None:
        nonlocal lag
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            lag = max(lag, time.monotonic() - before - 0.01)

    beating = asyncio.create_task(heartbeat())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for _ in range(40):  # 40 × 100 pipelined requests with a long header: ~4 MB of log lines
            writer.write(get("/notes/1", "User-Agent: " + "u" * 900) * 100)
            for _ in range(100):
                assert (await read_response(reader)).status == 200
        writer.close()
        dropped = server.access_log.dropped
        assert dropped > 0
        assert lag < 2, lag  # the loop is never blocked on the pipe: a breakage guard, generous on purpose
        assert any("records dropped" in record.getMessage() for record in caplog.records)
    finally:
        beating.cancel()
        drained = threading.Event()

        def drain() -> None:  # let the writer finish, so that stop() can join it
            os.set_blocking(reader_fd, True)
            while os.read(reader_fd, 1 << 16):
                pass
            drained.set()

        threading.Thread(target=drain, daemon=True).start()
        await server.stop()
        await asyncio.to_thread(drained.wait, 5)
        os.close(reader_fd)
    assert server.access_log.dropped == dropped  # nothing logged after the last request


def test_bad_access_log_settings_are_refused():
    with pytest.raises(ValueError, match="one of combined, json"):
        AccessLog("-", "apache")
    with pytest.raises(ValueError, match="at least 1"):
        AccessLog("-", queue_size=0)


def logged_request(agent_size: int) -> Request:
    """A request as the connection hands it to the log, with a User-Agent of ``agent_size`` bytes."""
    return Request("GET", "/json", b"/json", "", "1.1", [(b"user-agent", b"u" * agent_size)], App())


class RecordingAccessLog(AccessLog):
    """Keeps the size of each write the writer makes."""

    writes: list[tuple[int, int]]  # (lines, bytes)

    def _output(self, chunk: bytes, failed: bool, fd: int | None) -> bool:
        self.writes.append((chunk.count(b"\n"), len(chunk)))
        return super()._output(chunk, failed, fd)


async def test_several_lines_go_in_one_write_only_up_to_pipe_buf(tmp_path):
    path = tmp_path / "access.log"
    log = RecordingAccessLog(str(path))
    log.writes = []
    log.start()  # on the loop: the records gather, and are formatted and handed off every 10 ms
    sizes = [300, 1400, 900, 2500, 100, 3900, 700] * 20
    for index, size in enumerate(sizes):
        log.log(logged_request(size), 200, 2, time.monotonic())
        if index == 40:  # the first ones written meanwhile, the others at stop()
            deadline = time.monotonic() + 5
            while not log.writes:
                assert time.monotonic() < deadline, "nothing written"
                await asyncio.sleep(0.01)
    log.stop()
    assert sum(lines for lines, _ in log.writes) == len(sizes)
    assert any(lines > 1 for lines, _ in log.writes)
    # a write of several lines is atomic on a pipe (and not split between workers) only up to PIPE_BUF
    assert all(size <= select.PIPE_BUF for lines, size in log.writes if lines > 1), log.writes
    agents = [COMBINED.fullmatch(line)["agent"] for line in path.read_text().splitlines()]  # type: ignore[index]
    assert [len(agent) for agent in agents] == sizes


def test_stop_does_not_hang_on_a_writer_blocked_by_a_reader_that_does_not_read(tmp_path, caplog):
    fifo = tmp_path / "stuck"
    os.mkfifo(fifo)
    reader_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # opened, not read: the pipe fills up
    log = AccessLog(str(fifo), queue_size=1000)
    log.start()
    received = bytearray()
    try:
        for _ in range(300):  # ~1 MB of lines: far more than the pipe holds
            log.log(logged_request(3000), 200, 2, time.monotonic())
        time.sleep(0.1)  # the writer takes them and blocks
        started = time.monotonic()
        log.stop(timeout=0.5)
        assert time.monotonic() - started < 10  # not a hang: a breakage guard, generous on purpose
        assert any("has not finished writing" in record.getMessage() for record in caplog.records)
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the writer goes on, then closes its end
            if select.select([reader_fd], [], [], 1)[0]:
                chunk = os.read(reader_fd, 1 << 16)
                if not chunk:
                    break
                received += chunk
        os.close(reader_fd)
    assert received.count(b"\n") == 300  # nothing lost once the reader reads


async def test_a_head_the_parser_cannot_read_is_logged_without_a_request_line(tmp_path):
    for log_format in ("combined", "json"):
        path = tmp_path / f"access.{log_format}"
        server = Server(make_app(), port=0, access_log=str(path), access_log_format=log_format)
        await server.start()
        try:
            (response,) = await fetch(server.port, b"POST /json HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n")
        finally:
            await server.stop()
        assert response.status == 400
        (line,) = path.read_text().splitlines()
        if log_format == "json":
            record = json.loads(line)
            assert (record["method"], record["target"], record["protocol"], record["status"]) == (None, None, None, 400)
            assert record["request_id"] == response.header("x-request-id")
        else:
            match = COMBINED.fullmatch(line)
            assert match is not None and match["request"] == "-" and match["status"] == "400", line


async def test_a_record_factory_installed_before_ours_keeps_its_request_id():
    original = logging.getLogRecordFactory()

    def theirs(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = original(*args, **kwargs)
        record.request_id = "theirs"
        return record

    logging.setLogRecordFactory(theirs)
    aiorest.http.requestid._install_record_factory()  # ours on top, as when aiorest is imported after
    try:
        logger = logging.getLogger("tests.accesslog.factory")
        assert logger.makeRecord("x", logging.INFO, "", 0, "m", None, None).request_id == "theirs"
        async with serving() as server:
            (response,) = await fetch(server.port, get("/json"))
        assert json.loads(response.body)["current"] == response.header("x-request-id")
        token = aiorest.http.requestid.request_id_var.set(7)
        try:  # inside a request, ours
            assert logger.makeRecord("x", logging.INFO, "", 0, "m", None, None).request_id.endswith("-7")
        finally:
            aiorest.http.requestid.request_id_var.reset(token)
    finally:
        logging.setLogRecordFactory(original)
