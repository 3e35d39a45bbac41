"""FileResponse: a file on disk as a response, with validators, 304, ranges and precompressed siblings.

The handler returns a FileResponse naming a path; the server, which has the
request, calls :meth:`FileResponse.prepare` (in a worker thread: it opens and
stats the file) and gets back a :class:`FileBody` — the open file and the
byte segments to send — then writes them (server/filewriting.py), with
``loop.sendfile`` where the transport allows. Nothing of the file is held in
memory but the chunk being sent.
"""

from __future__ import annotations

import io
import mimetypes
import os
import secrets
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import BinaryIO

from .exceptions import HTTPNotFound
from .ranges import accepts_coding, etag_matches, http_date, parse_date, parse_ranges
from .response import Response, add_vary

__all__ = ["FileResponse", "FileBody", "FILE_REQUEST_HEADERS"]

# The request headers prepare() reads, fetched on the event loop's thread before it runs.
FILE_REQUEST_HEADERS = (
    "range",
    "if-range",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "accept-encoding",
)
# Precompressed siblings, best first: (coding, file suffix).
_SIBLINGS = (("br", ".br"), ("gzip", ".gz"))


@dataclass(slots=True)
class FileBody:
    """What the server sends after the head: ``segments`` of (bytes before, offset, count), then ``trailer``.

    ``file`` is open (the server closes it); None when there is no body to send
    (304, 412, 416, HEAD).
    """

    file: BinaryIO | None
    length: int
    segments: list[tuple[bytes, int, int]] = field(default_factory=list)
    trailer: bytes = b""

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class FileResponse(Response):
    """The file at ``path``, sent from disk with ``Content-Length``, ``ETag`` and ``Last-Modified``.

    The server answers ``304`` to a matching ``If-None-Match`` (or, without one,
    ``If-Modified-Since``), ``412`` to a failing ``If-Match``/``If-Unmodified-Since``,
    and serves ``Range`` requests (``206``, ``multipart/byteranges`` for several
    ranges, ``416`` when none is satisfiable, ``If-Range``). The media type comes
    from the file name unless given. ``cache_control`` is sent as ``Cache-Control``.
    With ``precompressed``, a ``path.br`` or ``path.gz`` beside the file is sent
    instead when ``Accept-Encoding`` allows, with ``Content-Encoding``.
    A missing file (or anything but a regular file) is a 404 when the response is sent.
    """

    # _root: set by App.static, the directory the file and its siblings must resolve into
    __slots__ = ("path", "cache_control", "precompressed", "_root")

    def __init__(
        self,
        path: str | os.PathLike[str],
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        *,
        cache_control: str | None = None,
        precompressed: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        if media_type is None:
            media_type = _media_type(os.path.splitext(self.path)[1])
        super().__init__(b"", status, headers, media_type)
        if cache_control is not None:
            self.headers["Cache-Control"] = cache_control  # checked by Headers
        self.cache_control = cache_control
        self.precompressed = precompressed
        self._root: str | None = None

    def prepare(self, method: str, request_headers: Mapping[str, str]) -> FileBody:
        """Open the file, decide the answer to this request (status, headers) and what to send.

        Blocking (open, fstat): the server calls it on the loop, as nginx opens files (filewriting.py). Raises
        HTTPNotFound when there is no regular file at the path.
        """
        file, coding = self._open(request_headers.get("accept-encoding"))
        try:
            return self._decide(file, coding, method, request_headers)
        except BaseException:
            file.close()
            raise

    def _open(self, accept_encoding: str | None) -> tuple[BinaryIO, str | None]:
        if self.precompressed:
            add_vary(self.headers, "Accept-Encoding")
            for coding, suffix in _SIBLINGS:
                if accepts_coding(accept_encoding, coding):
                    file = _open_regular(self.path + suffix, self._root)
                    if file is not None:
                        return file, coding
        file = _open_regular(self.path, self._root)
        if file is None:
            raise HTTPNotFound()
        return file, None

    def _decide(self, file: BinaryIO, coding: str | None, method: str, headers: Mapping[str, str]) -> FileBody:
        info = os.fstat(file.fileno())
        size = info.st_size
        # A strong validator: size and nanosecond mtime change with any ordinary write,
        # and If-Range (ranges resumed after a change) needs a strong one (§13.1.5).
        # Each coding is a representation of its own, so it gets a tag of its own.
        etag = f'"{size:x}-{info.st_mtime_ns:x}{"-" + coding if coding else ""}"'
        mtime = int(info.st_mtime)
        out = self.headers
        out["ETag"] = etag
        out["Last-Modified"] = http_date(mtime)
        if coding is not None:
            out["Content-Encoding"] = coding
        status = _precondition(method, headers, etag, mtime)
        if status is not None:
            self._status = status
            file.close()
            return FileBody(None, 0)
        out["Accept-Ranges"] = "bytes"
        ranges = None
        range_header = headers.get("range")
        if method == "GET" and range_header is not None and self._status == 200:
            if_range = headers.get("if-range")
            if if_range is None or _if_range_holds(if_range, etag, mtime):
                ranges = parse_ranges(range_header, size)
        if ranges is None:
            return FileBody(file, size, [(b"", 0, size)])
        if not ranges:
            self._status = 416
            out["Content-Range"] = f"bytes */{size}"
            file.close()
            return FileBody(None, 0)
        self._status = 206
        if len(ranges) == 1:
            first, last = ranges[0]
            out["Content-Range"] = f"bytes {first}-{last}/{size}"
            return FileBody(file, last - first + 1, [(b"", first, last - first + 1)])
        return self._multipart(file, ranges, size)

    def _multipart(self, file: BinaryIO, ranges: list[tuple[int, int]], size: int) -> FileBody:
        boundary = secrets.token_hex(16)
        part_type = self._media_type
        self._media_type = f"multipart/byteranges; boundary={boundary}"
        segments = []
        for index, (first, last) in enumerate(ranges):
            head = (
                f"{'' if index == 0 else chr(13) + chr(10)}--{boundary}\r\nContent-Type: {part_type}\r\n"
                f"Content-Range: bytes {first}-{last}/{size}\r\n\r\n"
            ).encode("latin-1")
            segments.append((head, first, last - first + 1))
        trailer = f"\r\n--{boundary}--\r\n".encode("latin-1")
        length = sum(len(head) + count for head, _, count in segments) + len(trailer)
        return FileBody(file, length, segments, trailer)


@lru_cache(maxsize=256)
def _media_type(suffix: str) -> str:
    """The media type of a file name ending in ``suffix`` (``.css``), by the mimetypes table."""
    return mimetypes.guess_type("file" + suffix)[0] or "application/octet-stream"


def _open_regular(path: str, root: str | None) -> BinaryIO | None:
    """``path`` opened for reading if it is a regular file (inside ``root``), else None.

    A directory is never listed. With ``root``, the file opened (symbolic links
    followed) must lie inside it: a link that leaves the directory is not served.
    Where the file is, is asked of the kernel once it is open (``/proc/self/fd``):
    one call instead of a ``realpath`` of every component, and no window between
    the check and the open in which a link could be swapped.
    """
    try:
        # Unbuffered: every read is a pread of its own, and a BufferedReader would cost a third of the open.
        file: BinaryIO = io.FileIO(path, "r")  # closed by the server once sent
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    fd = file.fileno()
    if not stat.S_ISREG(os.fstat(fd).st_mode) or (root is not None and not _inside(fd, path, root)):
        file.close()
        return None
    return file


def _inside(fd: int, path: str, root: str) -> bool:
    """Whether the file open as ``fd`` (opened by ``path``) lies inside the directory ``root`` (resolved)."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: resolve the path itself
        where = os.path.realpath(path)
    return where.startswith(root if root.endswith("/") else root + "/")


def _precondition(method: str, headers: Mapping[str, str], etag: str, mtime: int) -> int | None:
    """304 or 412 by RFC 9110 §13.2.2's order, or None to go on."""
    safe = method in ("GET", "HEAD")
    if_match = headers.get("if-match")
    if if_match is not None:
        if not etag_matches(if_match, etag, weak=False):
            return 412
    else:
        since = headers.get("if-unmodified-since")
        date = parse_date(since) if since is not None else None
        if date is not None and mtime > date:
            return 412
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None:
        if etag_matches(if_none_match, etag, weak=True):
            return 304 if safe else 412
    elif safe:
        since = headers.get("if-modified-since")
        date = parse_date(since) if since is not None else None
        if date is not None and mtime <= date:
            return 304
    return None


def _if_range_holds(if_range: str, etag: str, mtime: int) -> bool:
    """Whether the representation is the one ``If-Range`` names: a strong ETag, or exactly its (strong) date."""
    if_range = if_range.strip()
    if if_range.startswith(('"', "W/")):
        return etag_matches(if_range, etag, weak=False) and not if_range.startswith("W/")
    # A date is a validator strong enough only if the file had not changed for a second
    # when it was sent (§13.1.4): two writes within the second would share it.
    date = parse_date(if_range)
    return date is not None and int(date) == mtime and time.time() - mtime >= 1
