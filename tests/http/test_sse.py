"""Server-Sent Events (http/sse.py): framing, heartbeats, Last-Event-ID, the end of a stream
(the iterator ends, the client goes away, the server stops), never compressed; the test client's reader."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient as AiohttpTestClient

from aiorest import App, Compression, EventSourceResponse, Request, ServerSentEvent
from aiorest.http import EventStreamParser, get_codec
from aiorest.testing import AiorestTestServer, EventStream, TestClient

CODEC = get_codec("ujson")


def test_an_event_is_framed_line_by_line() -> None:
    event = ServerSentEvent(data="one\ntwo\r\nthree\rfour", event="note", id="7", retry=1500, comment="hi")
    assert event.encode(CODEC) == (
        b": hi\nevent: note\nid: 7\nretry: 1500\ndata: one\ndata: two\ndata: three\ndata: four\n\n"
    )
    assert ServerSentEvent(data={"a": [1, 2]}).encode(CODEC) == b'data: {"a":[1,2]}\n\n'
    assert ServerSentEvent(data=" lead").encode(CODEC) == b"data:  lead\n\n"  # the one space clients strip


@pytest.mark.parametrize(
    "fields",
    [{"event": "a\nb"}, {"event": "a\rb"}, {"id": "1\n"}, {"id": "a\0b"}, {"retry": -1}, {"retry": 1.5}],
)
def test_a_field_that_would_break_the_framing_is_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="ServerSentEvent"):
        ServerSentEvent(data="x", **fields)  # type: ignore[arg-type]


def test_the_parser_reads_what_the_stream_sends_in_any_pieces() -> None:
    sent = b"".join(
        [
            b"retry: 2000\n\n",
            ServerSentEvent(data="multi\nline", event="note", id="1").encode(CODEC),
            b": ping\n\n",
            b"data: crlf\r\n\r\n",
            b"data:no space\rid: 2\r\r",
            b"data\n\n",  # a field with no colon: an empty value
        ]
    )
    parser = EventStreamParser()
    events = [event for i in range(len(sent)) for event in parser.feed(sent[i : i + 1])]
    assert [(e.event, e.data, e.id) for e in events] == [
        ("note", "multi\nline", "1"),
        ("message", "crlf", "1"),
        ("message", "no space", "2"),
        ("message", "", "2"),
    ]
    assert parser.retry == 2000
    assert parser.comments == 1


def sse_app(record: dict[str, object], *, heartbeat: float | None = 15.0, compress: bool = False) -> App:
    app = App(middleware=[Compression(minimum_size=1)] if compress else [])

    @app.get("/events")
    async def events(request: Request) -> EventSourceResponse:
        record["last_event_id"] = request.last_event_id
        start = int(request.last_event_id or 0)

        async def produce() -> AsyncIterator[object]:
            yield ServerSentEvent(data="first", event="greeting", id=str(start + 1))
            yield {"n": start + 2}
            yield "plain\ntext"

        return EventSourceResponse(produce(), retry=3000, heartbeat=heartbeat)

    @app.get("/endless")
    async def endless(request: Request) -> EventSourceResponse:
        ended = asyncio.get_running_loop().create_future()
        record["ended"] = ended
        release = record["release"] = asyncio.Event()

        async def produce() -> AsyncIterator[object]:
            try:
                yield ServerSentEvent(data="hello", id="1")
                await release.wait()
                yield ServerSentEvent(data="released", id="2")
                await asyncio.Event().wait()  # never set: only the end of the stream stops it
            finally:
                ended.set_result("finally ran")

        return EventSourceResponse(produce(), heartbeat=heartbeat)

    return app


async def test_events_arrive_with_their_headers_fields_and_last_event_id() -> None:
    record: dict[str, object] = {}
    async with TestClient(sse_app(record)) as client:
        async with client.sse("/events") as events:
            response = events.response
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
            assert response.headers["Cache-Control"] == "no-cache"
            assert response.headers["X-Accel-Buffering"] == "no"
            assert response.headers["Transfer-Encoding"] == "chunked"
            received = [(e.event, e.data, e.id) async for e in events]
            assert received == [
                ("greeting", "first", "1"),
                ("message", '{"n":2}', "1"),
                ("message", "plain\ntext", "1"),
            ]
            assert events.retry == 3000
        assert record["last_event_id"] is None
        async with client.sse("/events", last_event_id="41") as events:
            assert [e.data async for e in events][:2] == ["first", '{"n":43}']
        assert record["last_event_id"] == "41"


async def test_heartbeats_go_while_the_iterator_waits() -> None:
    record: dict[str, object] = {}
    async with TestClient(sse_app(record, heartbeat=0.02)) as client:
        async with client.sse("/endless") as events:
            assert (await anext(events)).data == "hello"
            assert events.comments == 0
            following = asyncio.ensure_future(anext(events))
            while events.comments < 3:  # heartbeats only: the iterator waits for its release
                await asyncio.sleep(0.01)
            assert not following.done()
            record["release"].set()  # type: ignore[attr-defined]
            assert (await following).data == "released"  # the step that waited was not cancelled


async def test_a_client_that_goes_away_ends_the_iterator() -> None:
    record: dict[str, object] = {}
    async with TestClient(sse_app(record, heartbeat=None)) as client:
        before = asyncio.all_tasks()
        async with client.sse("/endless") as events:
            assert (await anext(events)).data == "hello"
        # The connection closed (no heartbeat to find it): the generator's finally runs, no task left.
        assert await asyncio.wait_for(record["ended"], 10) == "finally ran"  # type: ignore[arg-type]
        for _ in range(100):  # the connection's Task ends once the stream has
            if asyncio.all_tasks() <= before:
                break
            await asyncio.sleep(0.01)
        assert asyncio.all_tasks() <= before


async def test_a_client_that_half_closes_ends_the_iterator() -> None:
    record: dict[str, object] = {}
    async with TestClient(sse_app(record, heartbeat=None)) as client:
        reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
        writer.write(b"GET /endless HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"text/event-stream" in head
        assert b"data: hello" in await reader.readuntil(b"\n\n")
        writer.transport.write_eof()  # type: ignore[attr-defined]
        assert await asyncio.wait_for(record["ended"], 10) == "finally ran"  # type: ignore[arg-type]
        rest = await reader.read()
        assert rest.endswith(b"0\r\n\r\n")  # the chunked body ended, then the connection
        writer.close()


async def test_an_event_stream_is_never_compressed() -> None:
    record: dict[str, object] = {}
    async with TestClient(sse_app(record, compress=True), auto_decompress=False) as client:
        async with client.sse("/events", headers={"Accept-Encoding": "gzip, br"}) as events:
            assert "Content-Encoding" not in events.response.headers
            assert [e.data async for e in events][0] == "first"
        async with client.get("/events", headers={"Accept-Encoding": "gzip"}) as response:
            body = await response.read()
        assert body.startswith(b"retry: 3000\n\nevent: greeting\n")


async def test_stopping_the_server_ends_its_streams_cleanly() -> None:
    record: dict[str, object] = {}
    app = sse_app(record, heartbeat=None)
    client = TestClient(app)
    await client.start()
    try:
        async with client.sse("/endless") as events:
            assert (await anext(events)).data == "hello"
            # A deadline the test would notice: ended at the deadline, the stream would be cut (aborted)
            # and the client would see an incomplete body, not the end of the stream.
            stopping = asyncio.ensure_future(client.server.stop(timeout=60))
            assert [event async for event in events] == []  # the chunked body's end: a clean end
            assert record["ended"].result() == "finally ran"  # type: ignore[attr-defined]
            await stopping
    finally:
        await client.close()


LOCAL: contextvars.ContextVar[str] = contextvars.ContextVar("sse_test_local", default="unset")


async def test_the_iterator_runs_in_one_task_and_context_from_start_to_end() -> None:
    # An iterator that sets a context variable around its yields (db.transaction() does) must find
    # it set in its next steps, and reset it in its finally, whichever way the stream ends.
    seen: list[object] = []
    app = App()

    @app.get("/context")
    async def context(request: Request) -> EventSourceResponse:
        async def produce() -> AsyncIterator[str]:
            token = LOCAL.set("inside")
            task = asyncio.current_task()
            try:
                for n in range(3):
                    yield f"{n} {LOCAL.get()}"
                    seen.append(asyncio.current_task() is task)
                await asyncio.Event().wait()
            finally:
                LOCAL.reset(token)  # ValueError in another context
                seen.append("reset")

        return EventSourceResponse(produce(), heartbeat=0.01)

    async with TestClient(app) as client:
        async with client.sse("/context") as events:
            assert [(await anext(events)).data for _ in range(3)] == ["0 inside", "1 inside", "2 inside"]
        for _ in range(1000):
            if "reset" in seen:
                break
            await asyncio.sleep(0.01)
    assert seen == [True, True, True, "reset"]


async def test_heartbeats_between_slow_events_neither_skip_nor_run_ahead() -> None:
    produced: list[int] = []
    app = App()

    @app.get("/slow")
    async def slow(request: Request) -> EventSourceResponse:
        async def produce() -> AsyncIterator[str]:
            for n in range(4):
                await asyncio.sleep(0.05)  # several heartbeats each
                produced.append(n)
                yield str(n)

        return EventSourceResponse(produce(), heartbeat=0.01)

    async with TestClient(app) as client:
        async with client.sse("/slow") as events:
            received = []
            async for event in events:
                received.append(event.data)
                assert len(produced) <= len(received) + 1  # asked for one at a time
            assert received == ["0", "1", "2", "3"] and events.comments >= 4


async def test_an_iterator_that_raises_cuts_the_stream_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    app = App()

    @app.get("/broken")
    async def broken(request: Request) -> EventSourceResponse:
        async def produce() -> AsyncIterator[str]:
            yield "one"
            raise RuntimeError("the feed broke")

        return EventSourceResponse(produce())

    async with TestClient(app) as client:
        async with client.sse("/broken") as events:
            assert (await anext(events)).data == "one"
            with pytest.raises(aiohttp.ClientPayloadError):  # no last chunk: the client sees it incomplete
                await anext(events)
    assert any("the feed broke" in str(record.exc_info) for record in caplog.records if record.exc_info)


async def test_the_reader_takes_a_response_of_aiohttps_own_test_client() -> None:
    record: dict[str, object] = {}
    async with AiohttpTestClient(AiorestTestServer(sse_app(record))) as client:
        async with client.get("/events", headers={"Last-Event-ID": "9"}) as response:
            assert [event.data async for event in EventStream(response)][:2] == ["first", '{"n":11}']


class _CountingFuture(asyncio.Future[None]):
    """A future that counts the callbacks added to it: the server's ``stopping``, shared by every stream."""

    added = 0

    def add_done_callback(self, fn: Any, *, context: contextvars.Context | None = None) -> None:
        type(self).added += 1
        super().add_done_callback(fn, context=context)


async def test_a_stream_registers_on_the_shared_ending_futures_once_not_per_event() -> None:
    # Every stream of a worker waited on the one ``stopping`` future (each has its own now: ServerState).
    # Registering on it for each event, and removing that callback (a scan of all the other streams'
    # callbacks), made a broadcast to N streams cost N² steps: 10,000 streams stalled the loop for seconds
    # (python -m load live). Once per stream it is.
    async def events() -> AsyncIterator[str]:
        for n in range(50):
            yield str(n)

    stopping = _CountingFuture()
    disconnected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    response = EventSourceResponse(events(), heartbeat=None)
    frames: list[bytes] = []

    async def drain() -> None:
        pass

    await response.send(frames.append, drain, CODEC, (disconnected, stopping))
    assert frames == [b"data: %d\n\n" % n for n in range(50)]
    assert _CountingFuture.added == 1
    assert not stopping.done() and not disconnected.done()


async def test_no_heartbeat_piles_up_behind_a_client_that_does_not_read() -> None:
    # a heartbeat written while an event waits for the client to read would only add to its backlog,
    # every interval, for as long as it stalls: none goes until the client has read
    released = asyncio.Event()

    async def events() -> AsyncIterator[str]:
        yield "one"
        await asyncio.Event().wait()  # nothing more
        yield "never"

    async def drain() -> None:
        await released.wait()

    frames: list[bytes] = []
    stopping: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    response = EventSourceResponse(events(), heartbeat=0.01)
    sending = asyncio.ensure_future(response.send(frames.append, drain, CODEC, (stopping,)))
    await asyncio.sleep(0.15)  # 15 heartbeats' worth, with the client behind
    assert frames == [b"data: one\n\n"]
    released.set()
    await asyncio.sleep(0.1)
    assert frames[1:] and set(frames[1:]) == {b": ping\n\n"}  # read now: the heartbeats go again
    stopping.set_result(None)
    await sending
