"""Raw-socket requests for the API tests: bytes out, parsed responses back, without waiting for a close."""

from __future__ import annotations

import asyncio

from tests.rawhttp import RawResponse, parse_responses


async def read_response(reader: asyncio.StreamReader, *, timeout: float = 5.0) -> RawResponse:
    """Read exactly one response (framed by Content-Length, chunked, or none for 1xx/204/304)."""
    async with asyncio.timeout(timeout):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            (response,), _ = parse_responses(head, head_request=True)
            if response.status != 100:
                break
        if response.status in (204, 304):
            return response
        length = response.header("content-length")
        if length is not None:
            response.body = await reader.readexactly(int(length))
            return response
        assert response.header("transfer-encoding") == "chunked", response.headers
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            body += await reader.readexactly(size)
            assert await reader.readexactly(2) == b"\r\n"
            if size == 0:
                response.body = bytes(body)
                return response


async def fetch(port: int, payload: bytes, *, count: int = 1) -> list[RawResponse]:
    """Send ``payload`` on a new connection and read ``count`` responses."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        return [await read_response(reader) for _ in range(count)]
    finally:
        writer.close()


def get(path: str, *headers: str) -> bytes:
    """A GET request on HTTP/1.1, with extra header lines."""
    extra = "".join(f"{header}\r\n" for header in headers)
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode()
