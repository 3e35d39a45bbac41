"""The markers a typed handler's parameters carry: where each input comes from.

``Annotated[int, Query("page-size")]``, ``Annotated[str, Header()]``,
``Annotated[str | None, Cookie("session")]``, ``Annotated[list[Item], Body()]``,
``Annotated[Signup, Form()]``. :func:`~aiorest.typed.read_signature` reads them
once, when the route is registered.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

__all__ = ["Query", "Header", "Cookie", "Body", "Form", "Marker", "Source"]

Source = Literal["path", "query", "header", "cookie", "body", "form"]


@dataclasses.dataclass(frozen=True, slots=True)
class Marker:
    """What every marker is: a source, and maybe the input's name on the wire (``alias``)."""

    alias: str | None = None
    source: ClassVar[Source]


@dataclasses.dataclass(frozen=True, slots=True)
class Query(Marker):
    """``Annotated[int, Query("page-size")]``: a query parameter read under another key.

    A parameter without a marker that is not a path parameter is a query
    parameter under its own name already. On a Struct, dataclass or TypedDict,
    ``Query()`` gathers the query parameters into it, one per field.
    """

    source: ClassVar[Source] = "query"


@dataclasses.dataclass(frozen=True, slots=True)
class Header(Marker):
    """``Annotated[str, Header()]``: a request header, by default the parameter's name
    with ``_`` written ``-`` (``x_token`` reads ``X-Token``); ``alias`` names it."""

    source: ClassVar[Source] = "header"


@dataclasses.dataclass(frozen=True, slots=True)
class Cookie(Marker):
    """``Annotated[str | None, Cookie("session")]``: a cookie, by default under the parameter's name."""

    source: ClassVar[Source] = "cookie"


@dataclasses.dataclass(frozen=True, slots=True)
class Body(Marker):
    """``Annotated[list[Item], Body()]``: the JSON body, when its type is not a Struct,
    dataclass or TypedDict (which are the body without a marker)."""

    source: ClassVar[Source] = "body"


@dataclasses.dataclass(frozen=True, slots=True)
class Form(Marker):
    """``Annotated[Signup, Form()]``: the form the body sends (urlencoded or multipart), one field
    a field of the Struct, dataclass or TypedDict; ``Annotated[str, Form()]``: one field of it,
    by default under the parameter's name (``alias`` names it).

    Fields are converted as query parameters are (a list takes a repeated key);
    a field annotated :class:`~aiorest.UploadFile` (``list[UploadFile]``,
    ``UploadFile | None``) takes files. A parameter annotated ``UploadFile``
    is a form's file without a marker. See :doc:`typed`.
    """

    source: ClassVar[Source] = "form"
