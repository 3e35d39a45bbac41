"""An exception in one line, for a log line or a message: the helpers every layer shares."""

from __future__ import annotations

__all__ = ["first_line", "one_line"]


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type's name when it has none."""
    return str(exc).strip().partition("\n")[0] or type(exc).__name__


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message (notes)``: an error to log in one line."""
    message = str(exc).strip()
    text = f"{type(exc).__name__}: {message.partition(chr(10))[0]}" if message else type(exc).__name__
    notes = getattr(exc, "__notes__", None)
    return f"{text} ({'; '.join(notes)})" if notes else text
