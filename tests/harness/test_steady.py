"""The steady load client (harness/steady.py) that the restart and failover tests trust to count failures."""

from __future__ import annotations

import asyncio

from aiorest import App, Request
from harness.steady import run


async def test_a_steady_run_sends_at_its_rate_and_counts_answers(aiorest_client):
    app = App()

    @app.get("/ok")
    async def ok(request: Request) -> dict[str, bool]:
        return {"ok": True}

    client = await aiorest_client(app)
    result = await run(client.url + "/ok", rate=200, duration=1.0, connections=4, timeout=2)
    # Never faster than the rate. How close to it a run comes is the machine's business: on a loaded CI
    # machine (two test processes on two cores) the clients' timers fired late and a run sent 136 of 200,
    # with answers in 0.15 ms; a test does not assert speed, so the lower bound only says it keeps sending.
    assert 20 <= result.sent <= 204
    assert result.failed == 0 and result.statuses == {200: result.sent}
    assert result.connections_opened == 4  # kept alive
    assert sum(sent for sent, _ in result.timeline) == result.sent and len(result.timeline) == 1
    assert result.percentile(99) < 1000


async def test_resets_closes_and_5xx_are_failures_and_connection_close_is_not():
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                served += 1
                if served % 4 == 1:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                    await writer.drain()
                    break
                if served % 4 == 2:
                    writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                elif served % 4 == 3:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
                    await writer.drain()
                    break  # closed in the body
                else:
                    break  # closed before the response
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        # a second at 100 a second: on a loaded CI machine late timers sent only 3 in 0.4 s, and every kind of
        # answer below needs a request of its own (one cycle of the server's four is what is asserted)
        result = await run(f"http://127.0.0.1:{port}/", rate=100, duration=1.0, connections=1, timeout=1)
    finally:
        server.close()
        await server.wait_closed()
    assert result.sent >= 4
    assert result.failed == result.sent - result.statuses[200] > 0
    assert result.failures["status 503"] >= 1
    assert sum(failed for _, failed in result.timeline) == result.failed
    assert any(reason.startswith("ConnectionError: closed") for reason in result.failures)
