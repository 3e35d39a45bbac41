"""Writing a FileResponse: the file opened off the loop, then its segments by ``loop.sendfile`` or by reads.

``loop.sendfile`` hands the copy to the kernel where the loop and transport
allow it (asyncio's selector loop on a plain socket). Elsewhere — uvloop, whose
loop does not implement it, and TLS — the file is read a chunk at a time in a
worker thread, each chunk written once the transport has taken the last
(``drain``): memory stays bounded by one chunk plus the transport's buffer
limit, whatever the file's size.

asyncio's own fallback is not used: it swaps the transport's protocol for the
time of the copy, which would hide a client's close from the connection.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

from ..http import requestid
from ..http.exceptions import ClientDisconnected, HTTPError
from ..http.files import FILE_REQUEST_HEADERS, FileBody, FileResponse
from ..http.jsoncodec import JSONCodec
from ..http.request import Request
from ..http.response import error_response
from .writing import response_head, write_response

__all__ = ["write_file", "CHUNK"]

CHUNK = 256 * 1024  # one read of the fallback: large enough that the thread hop is cheap per byte
_NO_SENDFILE = (NotImplementedError, asyncio.SendfileNotAvailableError)


async def write_file(
    transport: asyncio.WriteTransport,
    loop: asyncio.AbstractEventLoop,
    request: Request,
    response: FileResponse,
    drain: Callable[[], Awaitable[None]],
    codec: JSONCodec,
    *,
    header_lines: str,
    connection: str,
    request_id: requestid.RequestId,
) -> tuple[int, int] | None:
    """Send ``response`` for ``request``: (status, body bytes sent), or None when the client went away."""
    wanted = {name: value for name in FILE_REQUEST_HEADERS if (value := request.header(name)) is not None}
    opening = loop.run_in_executor(None, response.prepare, request.method, wanted)
    try:
        # Shielded: a handler cancelled now (its client gone) must still close the file the thread opens.
        body: FileBody = await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(_close_opened)
        raise
    except HTTPError as exc:
        error = error_response(exc)
        if transport.is_closing():
            return None
        sent = write_response(
            transport,
            error,
            error.render(codec),
            head_request=request.method == "HEAD",
            header_lines=header_lines,
            connection=connection,
            request_id=request_id,
        )
        return error.status, sent
    try:
        if transport.is_closing():
            return None
        transport.write(response_head(response, body.length, False, header_lines, connection, request_id))
        if request.method == "HEAD" or body.file is None:
            return response.status, 0
        sent = 0
        native = True
        for prefix, offset, count in body.segments:
            if prefix:
                transport.write(prefix)
            if native:
                try:
                    sent += await loop.sendfile(transport, body.file, offset, count, fallback=False)
                    continue
                except _NO_SENDFILE:
                    native = False
            sent += await _copy(transport, loop, body.file.fileno(), offset, count, drain)
        if body.trailer:
            transport.write(body.trailer)
        await drain()
        if transport.is_closing():
            return None
        return response.status, sent
    except (ClientDisconnected, ConnectionError, RuntimeError):  # RuntimeError: sendfile on a closed transport
        return None
    finally:
        body.close()


def _close_opened(opening: asyncio.Future[FileBody]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()


async def _copy(
    transport: asyncio.WriteTransport,
    loop: asyncio.AbstractEventLoop,
    fd: int,
    offset: int,
    count: int,
    drain: Callable[[], Awaitable[None]],
) -> int:
    """``count`` bytes of ``fd`` from ``offset``, read in a worker thread a chunk at a time."""
    sent = 0
    while sent < count:
        if transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        chunk = await loop.run_in_executor(None, os.pread, fd, min(CHUNK, count - sent), offset + sent)
        if not chunk:
            raise RuntimeError("the file shrank while it was sent")  # the length sent is wrong now: close
        transport.write(chunk)
        sent += len(chunk)
        await drain()
    return sent
