"""The ceiling: asyncio.Protocol + httptools + uvloop answering canned responses.

No framework at all: what Python on asyncio can do for these two endpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from email.utils import formatdate
from typing import cast

import httptools
import uvloop

JSON_BODY = b'{"message":"Hello, World!"}'
TEXT_BODY = b"Hello, World!"


def canned(content_type: bytes, body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nServer: ceiling\r\nDate: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
    return head % (formatdate(usegmt=True).encode(), content_type, len(body)) + body


RESPONSES = {b"/json": canned(b"application/json", JSON_BODY), b"/plaintext": canned(b"text/plain", TEXT_BODY)}
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class Ceiling(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP server's transports are Transports
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_message_complete(self) -> None:
        self.transport.write(RESPONSES.get(self.url, NOT_FOUND))
        if not self.parser.should_keep_alive():
            self.transport.close()


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Ceiling, "127.0.0.1", port, backlog=2048)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    uvloop.run(main(parser.parse_args().port))
