"""The headers of the example's attachments: file names, media types, Content-Disposition, Range.

Pure functions of header values (example_app/attachments.py uses them), so that
each is tested without a request.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal
from urllib.parse import quote

__all__ = ["byte_range", "content_disposition", "display_name", "media_type"]

# What a client's Content-Type must look like to be sent back as ours (else application/octet-stream).
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,62}/[a-z0-9][a-z0-9!#$&^_.+-]{0,62}$")


def display_name(filename: str | None) -> str:
    """The client's file name as shown and sent back: its last path segment (some browsers send
    ``C:\\Users\\...``), without control characters, at most 255 characters; ``attachment`` if none is left."""
    name = re.split(r"[/\\]", filename or "")[-1]
    name = "".join(char for char in name if unicodedata.category(char)[0] != "C").strip()
    return name[:255] or "attachment"


def media_type(content_type: str) -> str:
    """The part's declared type if it is a plain ``type/subtype`` (parameters dropped), else
    ``application/octet-stream``."""
    base = content_type.partition(";")[0].strip().lower()
    return base if _MEDIA_TYPE.match(base) else "application/octet-stream"


def content_disposition(filename: str) -> str:
    """``attachment`` with the name twice (RFC 6266): ``filename`` in ASCII for old clients,
    ``filename*`` in UTF-8, percent-encoded, for the others."""
    fallback = "".join(char if " " <= char <= "~" and char not in '"\\%' else "_" for char in filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def byte_range(header: str, size: int) -> tuple[int, int] | Literal["unsatisfiable"] | None:
    """The one range of a ``Range`` value as (first, last), inclusive (RFC 9110, 14.1.2).

    None: answer the whole file (not one ``bytes`` range we read, or several ranges,
    which a server may ignore); ``"unsatisfiable"``: no byte of it is in the file (416).
    """
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first_text, dash, last_text = (part.strip() for part in spec.partition("-"))
    if not dash or not all(text.isascii() and text.isdigit() for text in (first_text, last_text) if text):
        return None
    if not first_text:  # a suffix: the last N bytes
        if not last_text:
            return None
        length = int(last_text)
        return (max(size - length, 0), size - 1) if length and size else "unsatisfiable"
    first = int(first_text)
    if last_text and int(last_text) < first:
        return None  # invalid: the header is ignored
    if first >= size:
        return "unsatisfiable"
    return first, min(int(last_text), size - 1) if last_text else size - 1
