"""Writing a FileResponse: the file opened, then its segments sent by ``loop.sendfile`` or by reads.

The file is opened and stat'ed on the loop, as nginx does: for a file whose inode
is in the kernel's cache, microseconds, where a worker thread's round trip costs
a hundred (measured: bench/uploads.py, files).

``loop.sendfile`` hands the copy to the kernel where the loop and transport
allow it (asyncio's selector loop on a plain socket). Elsewhere — uvloop, whose
loop does not implement it, and TLS — the file is read a chunk at a time: on the
loop with ``RWF_NOWAIT`` while its pages are in the page cache (the read cannot
block: the kernel answers EAGAIN instead), in a worker thread when they must come
from the disk. Each chunk is written once the transport has taken the last
(``drain``): memory stays bounded by one chunk plus the transport's buffer
limit, whatever the file's size.

asyncio's own fallback is not used: it swaps the transport's protocol for the
time of the copy, which would hide a client's close from the connection.
"""

from __future__ import annotations

import asyncio
import errno
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
    try:
        body: FileBody = response.prepare(request.method, wanted)
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
        head = response_head(response, body.length, False, header_lines, connection, request_id)
        if request.method == "HEAD" or body.file is None:
            transport.write(head)
            return response.status, 0
        sent = 0
        # asyncio's own loops have sendfile (a TLS transport still refuses it); uvloop has none.
        native = isinstance(loop, asyncio.BaseEventLoop)
        for prefix, offset, count in body.segments:
            if native:
                transport.write(head + prefix)
                head = b""
                if not count:  # an empty file: loop.sendfile wants a positive count
                    continue
                try:
                    sent += await loop.sendfile(transport, body.file, offset, count, fallback=False)
                    continue
                except _NO_SENDFILE:
                    native = False
            # The head and the first chunk go in one write: a small file is one send, not two.
            sent += await _copy(transport, loop, body.file.fileno(), offset, count, drain, head + prefix)
            head = b""
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


async def _copy(
    transport: asyncio.WriteTransport,
    loop: asyncio.AbstractEventLoop,
    fd: int,
    offset: int,
    count: int,
    drain: Callable[[], Awaitable[None]],
    before: bytes = b"",
) -> int:
    """``count`` bytes of ``fd`` from ``offset``, read a chunk at a time: on the loop what the page
    cache holds, in a worker thread what must come from the disk; ``before`` is written with the first."""
    sent = 0
    while sent < count:
        if transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        size = min(CHUNK, count - sent)
        chunk = _read_cached(fd, size, offset + sent)
        if chunk is None:
            chunk = await loop.run_in_executor(None, os.pread, fd, size, offset + sent)
        if not chunk:
            raise RuntimeError("the file shrank while it was sent")  # the length sent is wrong now: close
        if before:
            transport.write(before + chunk)
            before = b""
        else:
            transport.write(chunk)
        sent += len(chunk)
        await drain()
    if before:  # nothing to read (an empty segment): what goes before it still goes
        transport.write(before)
    return sent


_nowait = hasattr(os, "preadv") and hasattr(os, "RWF_NOWAIT")  # False once the file system refuses it


def _read_cached(fd: int, size: int, offset: int) -> bytes | memoryview | None:
    """Up to ``size`` bytes at ``offset`` if the page cache holds them (a read that cannot block); None if not."""
    global _nowait
    if not _nowait:
        return None
    buffer = bytearray(size)
    try:
        read = os.preadv(fd, [buffer], offset, os.RWF_NOWAIT)
    except BlockingIOError:
        return None  # not cached: the disk it is
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            _nowait = False  # a file system (or kernel) without RWF_NOWAIT for buffered reads
            return None
        raise
    if read == 0 and size:
        return b""  # the end of the file: the caller's check
    return memoryview(buffer)[:read]
