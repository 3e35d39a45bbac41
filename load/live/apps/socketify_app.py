"""socketify.py (uWebSockets under Python): the live endpoints, the fastest anchor.

    python -m load.live.apps.socketify_app --port PORT

Its idiomatic broadcast: every WebSocket subscribes to one topic and ``App.publish`` sends in C++;
each event stream is a response left open (``write`` without ``end``, chunked), written in turn.
The heartbeat runs on the asyncio loop socketify drives from libuv's.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from socketify import App, CompressOptions, OpCode  # type: ignore[import-untyped]

from load.live.apps.heartbeat import Heartbeat, payload

app = App()
heartbeat = Heartbeat()
streams: set[Any] = set()
open_sockets = [0]


def ws_open(socket: Any) -> None:
    socket.subscribe("all")
    open_sockets[0] += 1


def ws_message(socket: Any, message: Any, opcode: OpCode) -> None:
    socket.send(message, opcode)


def ws_close(socket: Any, code: int, message: Any) -> None:
    open_sockets[0] -= 1


def sse(res: Any, req: Any) -> None:
    res.write_status(200)
    res.write_header("Content-Type", "text/event-stream")
    res.write_header("Cache-Control", "no-cache")
    res.write(": ok\n\n")
    streams.add(res)
    res.on_aborted(streams.discard)


def broadcast(res: Any, req: Any) -> None:
    heartbeat.mark()
    message = payload()
    app.publish("all", message, OpCode.TEXT)
    event = f"data: {message}\n\n"
    for stream in list(streams):
        stream.write(event)
    res.write_header("Content-Type", "application/json")
    res.end(json.dumps({"ws": open_sockets[0], "sse": len(streams)}))


def stats(res: Any, req: Any) -> None:
    res.write_header("Content-Type", "application/json")
    res.end(json.dumps(heartbeat.stats(ws=open_sockets[0], sse=len(streams))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    app.ws(
        "/ws",
        {
            "compression": CompressOptions.DISABLED,
            "idle_timeout": 960,  # uWebSockets' longest: a run never idles that long
            "send_pings_automatically": False,
            "open": ws_open,
            "message": ws_message,
            "close": ws_close,
        },
    )
    app.get("/sse", sse)
    app.post("/broadcast", broadcast)
    app.get("/stats", stats)
    heartbeat.task = app.loop.ensure_future(heartbeat.run())
    app.listen(port)
    app.run()


if __name__ == "__main__":
    main()
