"""Reading a request's body: as a stream, whole, as text, JSON or a form; and how the connection feeds it.

Part of :class:`~aiorest.Request` (its base): the connection that parsed the
request feeds the body (``feed_body``, ``end_body``, ``drop_body``), handlers
and middleware read it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from .body import IncomingBody
from .datastructures import Headers, header_key, raw_header
from .exceptions import ClientDisconnected, HTTPBadRequest
from .formlimits import FormLimits
from .forms import FORM_TYPES, FormData, read_form
from .interfaces import AppInterface, BodySource
from .jsonbody import bad_body, read_json_body

__all__ = ["RequestBody"]


class RequestBody:
    """The body of a :class:`~aiorest.Request`: read by handlers, fed by the connection."""

    # Declared by Request, which sets them.
    app: AppInterface
    protocol: BodySource | None
    raw_headers: list[tuple[bytes, bytes]]
    _headers: Headers | None
    _incoming: IncomingBody | None
    _plain: bool
    _body: bytes | None = None  # the whole body once read (or replaced)
    _body_taken = False  # read or streamed: the chunks are gone
    _form: FormData | None = None  # the form once read

    if TYPE_CHECKING:

        def header(self, name: str | bytes) -> str | None: ...  # Request's

    _gone = False  # the client closed the connection, or its side of it
    _gone_waiter: asyncio.Future[None] | None = None

    @property
    def content_type(self) -> str:
        """The media type of the body, lower-cased, without parameters ('' when absent)."""
        value = raw_header(self.raw_headers, b"content-type")
        return value.decode("latin-1").partition(";")[0].strip().lower() if value else ""

    async def stream(self) -> AsyncIterator[bytes]:
        """Yield the body in chunks as they arrive (decoded if chunked on the wire)."""
        if self._body is not None:
            if self._body:
                yield self._body
            return
        if self._body_taken:
            raise RuntimeError("the request body was already streamed")
        self._body_taken = True
        incoming = self._incoming
        while incoming is not None and (chunk := await incoming.next_chunk(self._source)) is not None:
            yield chunk

    async def read(self) -> bytes:
        """The whole body (kept, so it can be read again).

        The body is gathered in the server's buffer first (:meth:`buffer_body`), where
        ``Limits.max_body_memory`` bounds what all the requests hold while their clients send.
        """
        if self._body is None:
            if self._body_taken:
                raise RuntimeError("the request body was already streamed")
            await self._buffered()
            self._body_taken = True
            incoming = self._incoming
            self._body = b"" if incoming is None else await incoming.read_all(self._source)
        return self._body

    async def text(self) -> str:
        """The body decoded as UTF-8 (400 if it is not)."""
        body = await self.read()
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HTTPBadRequest(f"request body is not valid UTF-8: {exc.reason}") from None

    async def json(self) -> Any:
        """The body parsed with the app's JSON codec.

        415 if a Content-Type other than JSON was sent; 400 if the body is empty,
        not valid UTF-8, or not valid JSON.
        """
        body = await self.json_body()
        try:
            return self.app.json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad_body(f"request body is not valid JSON: {exc}", locate=False) from None

    async def json_body(
        self, *, required: bool = True, strict_content_type: bool = False, locate: bool = False
    ) -> bytes:
        """The body, read once its ``Content-Type`` says JSON: for a handler that decodes it itself.

        415 for another type (``application/json`` or one ending in ``+json``
        is JSON), and for none with ``strict_content_type``; 400 for an empty
        body when ``required``, else ``b""``. An empty body is let through
        whatever its type when not ``required``: the handler's default applies.
        With ``locate``, the errors' ``details`` name where the problem is
        (``header.content-type``, ``body``), as a typed handler's do (see :doc:`typed`).
        """
        return await read_json_body(self, required, strict_content_type, locate)

    async def form(self, *, limits: FormLimits | None = None) -> FormData:
        """The form the body sends (see :doc:`forms`), read once and kept: fields as text, files
        as :class:`UploadFile`, in order.

        ``application/x-www-form-urlencoded`` and ``multipart/form-data``; 415 for
        another type, 400 for a malformed form, 413 past one of ``limits`` (default:
        the app's, ``App(uploads=Uploads(FormLimits(...)))``), each named. Files spill
        to temporary files as they arrive and are closed once the response is sent.
        """
        form = self._form
        if form is None:
            uploads = self.app.uploads
            form = self._form = await read_form(self.header, self.stream(), limits or uploads.limits, uploads)
            self._plain = False  # answered the long way, which calls answered(): the files are closed there
        return form

    def answered(self) -> None:
        """The response was sent, or will never be: free what the request held (its form's files).
        The server calls it; an app has no need to."""
        form = self._form
        if form is not None:
            form.close()

    def replace_body(self, body: bytes, *, drop: Iterable[str | bytes] = ()) -> None:
        """Make ``body`` the request's body, as if the client had sent it plain: for a middleware
        that transforms the body (:class:`Decompression`) once it has read it.

        :meth:`read`, :meth:`json` and :meth:`stream` give ``body``; the headers
        named in ``drop`` are gone and ``Content-Length`` is its length.
        """
        dropped = {header_key(name) for name in drop}
        dropped.add(b"content-length")
        raw = [(name, value) for name, value in self.raw_headers if name.lower() not in dropped]
        raw.append((b"Content-Length", b"%d" % len(body)))
        self.raw_headers = raw
        self._headers = None
        self._body = body

    def _source(self) -> BodySource | None:
        """Where the body comes from now: None once the connection is gone."""
        return self.protocol

    @property
    def waits_for_continue(self) -> bool:
        """Whether the client still waits for ``100 Continue`` before sending its body: it sent
        ``Expect: 100-continue``, no one has read the body yet, and the body has not arrived."""
        incoming = self._incoming
        return incoming is not None and incoming.waits_for_continue

    async def buffer_body(self) -> None:
        """Wait, taking nothing out of it, until the whole body is in the server's memory;
        raise its error if it fails (408 late, 413 too large, 503 past the server's
        ``Limits.max_body_memory``, :exc:`ClientDisconnected`). Returns at once for a
        request without a body, or one whose body was read already.

        The admission gate waits here before it gives a request a handler slot,
        so that a client sending its body slowly holds no slot meanwhile, whatever its size.
        A body its route lets grow past what the server buffers whole (its own
        ``max_body_size``) is not buffered: a form is read, its files spilled to disk
        (:meth:`form`); any other such body is left for the handler to read as it arrives.
        """
        if not await self._buffered() and self._form is None and not self._body_taken:
            if self.content_type in FORM_TYPES:
                await self.form()

    async def _buffered(self) -> bool:
        """:meth:`buffer_body` for a body the server buffers whole; False, at once, for another."""
        incoming = self._incoming
        if incoming is None:
            return True
        if not await incoming.buffer(self._source):
            return False
        if not incoming.done and self._body is None:
            raise ClientDisconnected("the request body is no longer available")
        return True

    # -- fed by the connection that parsed it (body.py); an app never calls these ----------

    def feed_body(self, chunk: bytes) -> int:
        """Add ``chunk`` to the body; returns how many bytes it buffered (0 once the body is dropped)."""
        incoming = self._incoming
        return 0 if incoming is None else incoming.feed(chunk)

    def end_body(self, error: BaseException | None = None) -> None:
        """The body is complete, or failed with ``error`` (raised to whoever reads it)."""
        incoming = self._incoming
        if incoming is not None:
            incoming.end(error)
        if error is not None and isinstance(error, ClientDisconnected):
            self.client_gone()

    def client_gone(self) -> None:
        """The client closed the connection, or its side of it: :meth:`disconnected` is done."""
        self._gone = True
        waiter = self._gone_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def disconnected(self) -> asyncio.Future[None]:
        """A future done once the client has closed the connection, or its side of it (a client that
        half-closes expects no more of the response): for a handler whose answer lasts, an event
        stream's say, to stop working for no one. Await it, or ``asyncio.wait`` on it beside other work."""
        waiter = self._gone_waiter
        if waiter is None:
            waiter = self._gone_waiter = asyncio.get_running_loop().create_future()
            if self._gone:
                waiter.set_result(None)
        return waiter

    def drop_body(self) -> int:
        """The request is answered: free its buffered body and discard what is still to come.

        Returns how many buffered bytes it freed.
        """
        incoming = self._incoming
        return 0 if incoming is None else incoming.drop()
