"""Forms as they arrive: ``application/x-www-form-urlencoded`` and ``multipart/form-data``.

A multipart body is parsed as a stream by defnull's ``multipart`` (its
``PushMultipartParser``, a sans-IO parser: bytes in, parts out), chosen over
python-multipart by measurement and security record (see docs/forms.rst and
``bench/multipart_parsers.py``). Each count and size is checked against
:class:`FormLimits` as the bytes come; files spill to anonymous temporary files
(uploads.py). Whatever stops a form — a limit, a malformed body, the client
going — closes the files it had made before the error goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from urllib.parse import parse_qsl

from .datastructures import Headers, MultiDict
from .exceptions import HTTPBadRequest, HTTPPayloadTooLarge, HTTPUnsupportedMediaType
from .formlimits import FormLimits
from .uploads import UploadFile, Uploads

try:
    import multipart  # type: ignore[import-untyped]
except ImportError:  # the `forms` extra: read_form says so when a multipart body comes
    multipart = None

__all__ = ["FormData", "read_form", "FORM_TYPES"]

URLENCODED = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data"
FORM_TYPES = frozenset({URLENCODED, MULTIPART})

# What defnull's parser says when it reaches one of the limits it is given, and the limit's name here.
_PARSER_LIMITS = {
    "Maximum segment count exceeded": "max_parts",
    "Maximum segment header length exceeded": "max_part_header_size",
    "Maximum segment header count exceeded": "max_part_headers",
}


class FormData(MultiDict["str | UploadFile"]):
    """A form's fields in order: text for a field, an :class:`UploadFile` for a file.

    ``form["title"]`` is the first value of ``title``, ``form.getall("files")`` all of
    them. Its files are closed once the response to its request has been sent
    (:meth:`close`): save what must outlive the request.
    """

    __slots__ = ("_release",)

    def __init__(self, items: Iterable[tuple[str, str | UploadFile]] = (), release: Callable[[], None] | None = None):
        super().__init__(items)
        self._release = release  # gives back the memory the form held (Uploads.free)

    def files(self) -> list[UploadFile]:
        """Every file of the form, in order."""
        return [value for _, value in self.multi_items() if isinstance(value, UploadFile)]

    def close(self) -> None:
        """Close every file (their temporary files are gone with them). Closing twice does nothing."""
        for upload in self.files():
            upload.close()
        release, self._release = self._release, None
        if release is not None:
            release()


def _too_large(what: str, limit_name: str, limit: int) -> HTTPPayloadTooLarge:
    return HTTPPayloadTooLarge(f"{what} exceeds FormLimits.{limit_name} ({limit})")


async def read_form(
    header: Callable[[str], str | None], body: AsyncIterator[bytes], limits: FormLimits, uploads: Uploads
) -> FormData:
    """The form a request sends, read whole from ``body``, its chunks; ``header(name)`` gives the
    request's headers. 415 for a body of another type."""
    content_type, options = _media_type(header("content-type") or "")
    if content_type == URLENCODED:
        return await _read_urlencoded(body, limits, uploads)
    if content_type == MULTIPART:
        return await _read_multipart(body, options.get("boundary"), limits, uploads)
    if header("content-length") in (None, "0") and header("transfer-encoding") is None:
        return FormData()  # no body at all: an empty form, whatever its type
    raise HTTPUnsupportedMediaType(
        f"a form is sent as {URLENCODED} or {MULTIPART}, not {content_type or 'without a Content-Type'}"
    )


_MEDIA_TYPES: dict[str, tuple[str, dict[str, str]]] = {}  # the Content-Types seen lately, parsed
_MEDIA_TYPES_KEPT = 64  # a client sends what it likes: at most this many kept, then forgotten at once


def _media_type(value: str) -> tuple[str, dict[str, str]]:
    """A Content-Type's media type, lower-cased, and its parameters (the dict is shared: read it only)."""
    parsed = _MEDIA_TYPES.get(value)
    if parsed is None:
        if len(_MEDIA_TYPES) >= _MEDIA_TYPES_KEPT:
            _MEDIA_TYPES.clear()
        parsed = _MEDIA_TYPES[value] = _parse_media_type(value)
    return parsed


def _parse_media_type(value: str) -> tuple[str, dict[str, str]]:
    if multipart is not None:
        media, options = multipart.parse_options_header(value)
        return media.lower(), options
    media, _, rest = value.partition(";")
    options = {}
    for item in rest.split(";"):
        key, _, val = item.strip().partition("=")
        if key:
            options[key.lower()] = val.strip('"')
    return media.strip().lower(), options


async def _read_urlencoded(chunks: AsyncIterator[bytes], limits: FormLimits, uploads: Uploads) -> FormData:
    body = bytearray()
    try:
        async for chunk in chunks:
            uploads.hold(len(chunk))
            body += chunk
            if len(body) > limits.max_memory:
                raise _too_large("the form", "max_memory", limits.max_memory)
    except BaseException:
        uploads.free(len(body))
        raise
    size = len(body)
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, errors="strict", max_num_fields=limits.max_fields)
        for name, value in pairs:
            if len(value) > limits.max_field_size:
                raise _too_large(f"field {name[:64]!r}", "max_field_size", limits.max_field_size)
    except UnicodeDecodeError:
        uploads.free(size)
        raise HTTPBadRequest("the form is not valid UTF-8 once percent-decoded") from None
    except ValueError:  # parse_qsl: max_num_fields exceeded
        uploads.free(size)
        raise _too_large("the form's number of fields", "max_fields", limits.max_fields) from None
    except BaseException:
        uploads.free(size)
        raise
    return FormData(pairs, lambda: uploads.free(size))


async def _read_multipart(
    chunks: AsyncIterator[bytes], boundary: str | None, limits: FormLimits, uploads: Uploads
) -> FormData:
    if multipart is None:
        message = "this server reads no multipart forms: pip install '.[forms]' in aiorest's checkout"
        raise HTTPUnsupportedMediaType(message)
    if not boundary:
        raise HTTPBadRequest("a multipart/form-data body needs a boundary parameter in its Content-Type")
    if len(boundary) > limits.max_boundary:
        raise HTTPBadRequest(f"the multipart boundary is longer than FormLimits.max_boundary ({limits.max_boundary})")
    reader = _MultipartReader(limits, uploads, boundary.encode("latin-1"))
    try:
        parser = multipart.PushMultipartParser(
            boundary,
            max_header_size=limits.max_part_header_size,
            max_header_count=limits.max_part_headers,
            max_segment_count=limits.max_parts,
        )
        async for chunk in chunks:
            reader.feed(parser, chunk)
        reader.end(parser)
    except multipart.ParserLimitReached as exc:
        reader.close()
        name = _PARSER_LIMITS.get(str(exc))
        if name is None:
            raise HTTPPayloadTooLarge(f"the multipart body reaches a limit: {exc}") from None
        raise _too_large("the multipart body", name, getattr(limits, name)) from None
    except multipart.MultipartError as exc:
        reader.close()
        raise HTTPBadRequest(f"malformed multipart body: {exc}") from None
    except BaseException:
        reader.close()
        raise
    return FormData(reader.items, reader.release)


class _MultipartReader:
    """Turns the parser's events into fields and files, holding each to its limits."""

    __slots__ = (
        "limits",
        "uploads",
        "items",
        "fields",
        "files",
        "held",
        "_unheld",
        "_part",
        "_name",
        "_frame",
    )

    def __init__(self, limits: FormLimits, uploads: Uploads, boundary: bytes) -> None:
        self.limits = limits
        self.uploads = uploads
        self.items: list[tuple[str, str | UploadFile]] = []
        self.fields = self.files = 0
        self.held = 0  # bytes in memory: fields, and files not spilled
        self._unheld = 0  # bytes of fields received in this chunk, held once it is parsed
        self._part: bytearray | UploadFile | None = None  # the part being received
        self._name = ""
        self._frame = _Frame(boundary, limits)

    def feed(self, parser: multipart.PushMultipartParser, chunk: bytes) -> None:
        frame = self._frame
        if not frame.before(chunk):
            return  # the epilogue: the parser would drop it
        ended = False
        for event in parser.parse(chunk):
            if event is None:
                self._end_part()
                ended = True
            elif type(event) is bytes or type(event) is bytearray:
                self._data(event)
            else:
                self._begin(event)
        if self._unheld:  # the fields' bytes, counted once a chunk rather than once a field
            unheld, self._unheld = self._unheld, 0
            self._hold(unheld, "the form's fields")
        frame.after(chunk, ended)

    def end(self, parser: multipart.PushMultipartParser) -> None:
        parser.close()  # raises if the body ended before its closing delimiter

    def _begin(self, segment: multipart.MultipartSegment) -> None:
        limits = self.limits
        name = segment.name or ""
        self._name = name
        if segment.filename is not None:
            self.files += 1
            if self.files > limits.max_files:
                raise _too_large("the form's number of files", "max_files", limits.max_files)
            # A file's headers are the handler's to read; a field's are not kept (a fifth of a form of fields).
            try:
                headers = Headers([(key, value) for key, value in segment.headerlist])
            except ValueError as exc:  # a control character in a part's header: what a response would refuse
                raise HTTPBadRequest(f"malformed multipart part header: {exc}") from None
            content_type = segment.content_type or "application/octet-stream"
            self._part = UploadFile(name, segment.filename, content_type, headers, self.uploads)
        else:
            self.fields += 1
            if self.fields > limits.max_fields:
                raise _too_large("the form's number of fields", "max_fields", limits.max_fields)
            self._part = bytearray()

    def _data(self, data: bytes | bytearray) -> None:
        part = self._part
        limits = self.limits
        size = len(data)
        if type(part) is bytearray:
            if len(part) + size > limits.max_field_size:
                raise _too_large(f"field {self._name[:64]!r}", "max_field_size", limits.max_field_size)
            self._unheld += size  # a chunk's worth at most: feed holds them when it is parsed
            part += data
            return
        assert isinstance(part, UploadFile)
        if part.size + size > limits.max_file_size:
            raise _too_large(f"file {part.filename[:64]!r}", "max_file_size", limits.max_file_size)  # type: ignore[index]
        if part.in_memory:
            uploads = self.uploads
            if (
                part.size + size > limits.spool_threshold
                or self.held + size > limits.max_memory
                or not uploads.can_hold(size)
            ):
                freed = part.spill()
                self.held -= freed
                uploads.free(freed)
            else:
                self.held += size
                uploads.hold(size)
        part.write(data)

    def _hold(self, size: int, what: str) -> None:
        self.uploads.hold(size)  # 503 past the process's budget
        self.held += size
        if self.held > self.limits.max_memory:
            raise _too_large(what, "max_memory", self.limits.max_memory)

    def release(self) -> None:
        """The form is closed: the memory it held is given back to the process's budget."""
        held, self.held = self.held, 0
        self.uploads.free(held)

    def _end_part(self) -> None:
        part = self._part
        self._part = None
        if type(part) is bytearray:
            try:
                value = part.decode("utf-8")
            except UnicodeDecodeError:
                raise HTTPBadRequest(f"field {self._name[:64]!r} is not valid UTF-8") from None
            self.items.append((self._name, value))
        elif isinstance(part, UploadFile):
            part.finished()
            self.items.append((self._name, part))

    def close(self) -> None:
        """The form failed: close every file it had made (the one being received too)."""
        for _, value in self.items:
            if isinstance(value, UploadFile):
                value.close()
        if isinstance(self._part, UploadFile):
            self._part.close()
        self.release()


class _Frame:
    """Where a multipart body is: before its first delimiter (the preamble), among its parts,
    or past its closing delimiter (the epilogue); bounds the first and the last.

    The closing delimiter follows the end of a part: it is looked for only in the chunks
    where a part ended (and the seam with the chunk before), so a large file is not
    scanned twice (the parser scans it for delimiters already).
    """

    __slots__ = ("_open", "_close", "_limits", "_seen", "_tail", "_state", "_end")

    def __init__(self, boundary: bytes, limits: FormLimits) -> None:
        self._open = b"--" + boundary
        self._close = b"\r\n--" + boundary + b"--"
        self._limits = limits
        self._seen = 0  # bytes before this chunk
        self._tail = b""  # the last bytes of the chunks before, for a delimiter across the seam
        self._state = _PREAMBLE
        self._end = 0  # where the closing delimiter ends

    def before(self, chunk: bytes) -> bool:
        """``chunk`` arrives: False if it is all epilogue (not for the parser). 413 past a limit."""
        limits = self._limits
        if self._state is _EPILOGUE:
            self._advance(chunk)
            if self._seen - self._end > limits.max_epilogue:
                raise _too_large("the multipart epilogue", "max_epilogue", limits.max_epilogue)
            return False
        if self._state is _PREAMBLE:
            at = self._find(self._open, chunk)
            if at is None:
                if self._seen + len(chunk) > limits.max_preamble + len(self._open):
                    raise _too_large("the multipart preamble", "max_preamble", limits.max_preamble)
            elif at > limits.max_preamble:
                raise _too_large("the multipart preamble", "max_preamble", limits.max_preamble)
            else:
                self._state = _PARTS
                if self._starts(at + len(self._open), b"--", chunk):  # an empty form: its only delimiter closes it
                    self._state = _EPILOGUE
                    self._end = at + len(self._open) + 2
        return True

    def after(self, chunk: bytes, part_ended: bool) -> None:
        """``chunk`` was parsed; ``part_ended``: a part ended in it (the closing delimiter may be there)."""
        if part_ended and self._state is _PARTS:
            at = self._find(self._close, chunk)
            if at is not None:
                self._state = _EPILOGUE
                self._end = at + len(self._close)
        self._advance(chunk)
        if self._state is _EPILOGUE and self._seen - self._end > self._limits.max_epilogue:
            raise _too_large("the multipart epilogue", "max_epilogue", self._limits.max_epilogue)

    def _advance(self, chunk: bytes) -> None:
        self._seen += len(chunk)
        keep = len(self._close)
        self._tail = (self._tail + chunk[-keep:])[-keep:]

    def _find(self, needle: bytes, chunk: bytes) -> int | None:
        """Where ``needle`` first begins in the body, looking in the seam and ``chunk``; None if not there."""
        seam = self._tail + chunk[: len(needle) - 1]
        at = seam.find(needle)
        if at != -1:
            return self._seen - len(self._tail) + at
        at = chunk.find(needle)
        return None if at == -1 else self._seen + at

    def _starts(self, position: int, expected: bytes, chunk: bytes) -> bool:
        """Whether the body has ``expected`` at ``position`` (within the tail and ``chunk``)."""
        start = position - (self._seen - len(self._tail))
        return (self._tail + chunk[: start + len(expected)])[start : start + len(expected)] == expected


_PREAMBLE, _PARTS, _EPILOGUE = object(), object(), object()
