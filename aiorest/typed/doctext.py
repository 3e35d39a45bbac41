"""The words of the OpenAPI document: an operation's summary and description, a schema's description.

They come from docstrings, written for Sphinx (reStructuredText) and indented
as the source is; OpenAPI's descriptions are CommonMark, and Swagger UI and
ReDoc show a summary as one line of plain text.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

__all__ = ["docstring", "described"]


def docstring(handler: Any) -> tuple[str, str]:
    """The summary (the first sentence) and the description (the whole docstring) of a handler.

    A list (Swagger UI's, ReDoc's) shows the summary alone on one line: it is
    the first sentence of the first paragraph, its lines joined, not the
    first line of the source, which may stop mid-sentence. The description is
    the docstring dedented, as FastAPI gives it, so that it reads whole where
    a tool shows it without the summary; a docstring of one sentence has
    none, rather than the same text twice.
    """
    doc = inspect.getdoc(handler) if inspect.isfunction(handler) or inspect.ismethod(handler) else None
    if doc is None:
        doc = inspect.getdoc(type(handler).__call__) if not inspect.isroutine(handler) else None
    if not doc:
        return "", ""
    doc = _markdown(doc)
    paragraph = " ".join(_PARAGRAPH_END.split(doc, maxsplit=1)[0].split())
    end = _SENTENCE_END.search(paragraph)
    summary = paragraph[: end.start() + 1] if end else paragraph
    return summary, doc if " ".join(doc.split()) != summary else ""


_PARAGRAPH_END = re.compile(r"\n[ \t]*\n")
# A full stop (or ! or ?) before a space ends a sentence; the one of an abbreviation does not.
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)(?<!\bcf)[.!?]\s")
# reStructuredText's inline literals (``x``) and roles (:class:`~a.b.C`, :func:`x <a.x>`) as
# Markdown's code spans, which OpenAPI's descriptions are (CommonMark) and which read as plain text.
_LITERAL = re.compile(r"``([^`]+)``")
_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`([^`]+)`")


def _markdown(text: str) -> str:
    return _LITERAL.sub(r"`\1`", _ROLE.sub(lambda role: f"`{_role_text(role.group(1))}`", text))


def _role_text(content: str) -> str:
    """What Sphinx shows of a role: its title (``title <target>``), else its target (``~``: the last name)."""
    title, bracket, _ = content.partition("<")
    if bracket and title.strip():
        return title.strip()
    return content[1:].rpartition(".")[2] if content.startswith("~") else content


def described(schema: dict[str, Any]) -> dict[str, Any]:
    """A component's description (a Struct's docstring) dedented, as a handler's is.

    msgspec dedents a docstring as a whole, and its first line, which starts
    at the quotes, has no indentation to remove: the lines after it kept
    theirs, and four spaces begin a code block in Markdown.
    """
    description = schema.get("description")
    if not isinstance(description, str):
        return schema
    return {**schema, "description": _markdown(inspect.cleandoc(description))}
