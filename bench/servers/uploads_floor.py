"""The floor of the uploads benchmark (bench/uploads.py): the least a server that puts an upload on disk must do.

A bare uvloop protocol, no framework and no multipart parser: each chunk of a
``POST`` body, as the socket gives it, is written as it is to an anonymous
temporary file (``tempfile.TemporaryFile``, in the folder aiorest's uploads
use), and the answer is the file part's size, worked out from the framing at
the body's two ends (its first part's head, its closing delimiter). A form's
fields are counted by their delimiters. No server can receive a body and put it
on disk for less kernel time (one receive, one write a chunk), and little less
time in Python: what the others spend above it is theirs.

It serves nothing else worth measuring: ``GET /ready`` only, and one request at a
time on a kept-alive connection (wrk does not pipeline).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from typing import Any

import uvloop

MAX_HEAD = 16 * 1024


class Floor(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.head = bytearray()  # the request head, until its blank line
        self.left = -1  # body bytes still to come; -1 while reading a head
        self.path = b""
        self.boundary = b""
        self.file: Any = None  # the upload's file descriptor; None for a form, kept in memory
        self.form = bytearray()
        self.first = b""  # the body's first bytes, up to its first part's head
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's is no asyncio.Transport subclass)

    def data_received(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.left < 0:
                view = self.read_head(view)
            else:
                view = self.read_body(view)

    def read_head(self, view: memoryview) -> memoryview:
        self.head += view
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > MAX_HEAD:
                self.close()
            return memoryview(b"")
        rest = memoryview(bytes(self.head[end + 4 :]))
        lines = bytes(self.head[:end]).split(b"\r\n")
        self.head.clear()
        self.path = lines[0].split(b" ")[1]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
        self.left = int(headers.get(b"content-length", b"0"))
        self.boundary = headers.get(b"content-type", b"").partition(b"boundary=")[2]
        self.received = 0
        self.first = b""
        if self.path == b"/upload":
            self.file = tempfile.TemporaryFile(buffering=0)  # raw: each write is one write(2)
        if self.left == 0:
            self.answer()
        return rest

    def read_body(self, view: memoryview) -> memoryview:
        chunk, rest = view[: self.left], view[self.left :]
        if self.file is not None:
            self.file.write(chunk)
            if len(self.first) < 512:
                self.first += bytes(chunk[:512])
        else:
            self.form += chunk
        self.received += len(chunk)
        self.left -= len(chunk)
        if self.left == 0:
            self.answer()
        return rest

    def answer(self) -> None:
        if self.path == b"/upload" and self.file is not None:
            head = self.first.find(b"\r\n\r\n") + 4
            closing = len(b"\r\n--" + self.boundary + b"--\r\n")
            body = {"size": self.received - head - closing}
            self.file.close()
            self.file = None
        elif self.path == b"/form":
            body = {"fields": bytes(self.form).count(b"--" + self.boundary + b"\r\n")}
            self.form.clear()
        else:
            body = {"ready": True}
        payload = json.dumps(body).encode()
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )
        self.left = -1

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Floor, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True, help="unused: the floor serves no files")
    args = parser.parse_args()
    uvloop.run(serve(args.port))
