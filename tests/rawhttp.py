"""A small, strict reader of raw HTTP/1.1 responses, for tests that speak bytes."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RawResponse:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def header_all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


def parse_responses(data: bytes, head_request: bool = False) -> tuple[list[RawResponse], bytes]:
    """Parse every complete response in ``data``; return them and the unparsed rest."""
    responses = []
    while True:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            return responses, data
        head, rest = data[:end].decode("latin-1"), data[end + 4 :]
        status_line, *lines = head.split("\r\n")
        version, status, _ = status_line.split(" ", 2)
        assert version == "HTTP/1.1", status_line
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines]
        response = RawResponse(int(status), headers)  # type: ignore[arg-type]
        if response.status == 100:
            data = rest
            responses.append(response)
            continue
        length = response.header("content-length")
        if head_request or response.status in (204, 304):
            body = b""
        elif length is not None:
            if len(rest) < int(length):
                return responses, data
            body, rest = rest[: int(length)], rest[int(length) :]
        elif response.header("transfer-encoding") == "chunked":
            body = b""
            while True:
                line_end = rest.find(b"\r\n")
                if line_end < 0:
                    return responses, data
                size = int(rest[:line_end], 16)
                if len(rest) < line_end + 2 + size + 2:
                    return responses, data
                body += rest[line_end + 2 : line_end + 2 + size]
                rest = rest[line_end + 2 + size + 2 :]
                if size == 0:
                    break
        else:  # delimited by close
            body, rest = rest, b""
        response.body = body
        responses.append(response)
        data = rest


async def exchange(
    port: int, payload: bytes, *, count: int = 1, timeout: float = 5.0
) -> tuple[list[RawResponse], bool]:
    """Send ``payload`` on a new connection; read ``count`` responses.

    Returns the responses and whether the server closed the connection after them.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await read_responses(reader, count, timeout=timeout)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass


async def read_responses(
    reader: asyncio.StreamReader, count: int, *, timeout: float = 5.0
) -> tuple[list[RawResponse], bool]:
    data = b""
    responses: list[RawResponse] = []
    closed = False
    async with asyncio.timeout(timeout):
        while len(responses) < count:
            chunk = await reader.read(65536)
            if not chunk:
                closed = True
                break
            data += chunk
            responses, _ = parse_responses(data)
            responses = [r for r in responses if r.status != 100]
        if not closed:
            try:
                async with asyncio.timeout(0.2):
                    closed = await reader.read(1) == b""
            except TimeoutError:
                closed = False
    return responses, closed
