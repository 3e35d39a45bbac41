"""Reading type hints: the helpers the typed handlers and the OpenAPI document share."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Annotated, Any, Union, get_args, get_origin

from ..http.uploads import UploadFile

try:
    import msgspec
except ImportError:  # an optional dependency: require_msgspec says so when it is needed
    msgspec = None  # type: ignore[assignment]

__all__ = ["hinted", "strip_annotated", "union_args", "sequence_item", "gathered_class", "is_upload", "require_msgspec"]

_SEQUENCES = frozenset({list, tuple, set, frozenset})


def require_msgspec(needs: str, extra: str, error: type[Exception] = RuntimeError) -> None:
    """Raise ``error`` saying that ``needs`` msgspec and how to install it, when it is missing."""
    if msgspec is None:
        raise error(f"{needs}: pip install '.[{extra}]' in aiorest's checkout")


def hinted(handler: Callable[..., Any]) -> Any:
    """What holds a handler's annotations: the function itself, or the ``__call__`` of an instance's class."""
    if inspect.isfunction(handler) or inspect.ismethod(handler):
        return handler
    return type(handler).__call__  # an instance with ``async def __call__``


def strip_annotated(hint: Any) -> Any:
    """The type without its ``Annotated`` metadata."""
    while get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    return hint


def union_args(tp: Any) -> tuple[Any, ...] | None:
    """The members of a union (``X | Y``, ``Optional[X]``), or None for any other type."""
    if get_origin(tp) in (Union, types.UnionType):
        return get_args(tp)
    return None


def sequence_item(tp: Any) -> Any | None:
    """The item type of ``list[X]`` (also tuple[X, ...], set, frozenset), maybe Optional."""
    tp = strip_annotated(tp)
    args = union_args(tp)
    if args is not None:
        others = [arg for arg in args if arg is not type(None)]
        return sequence_item(others[0]) if len(others) == 1 else None
    origin = get_origin(tp)
    if origin not in _SEQUENCES:
        return None
    items = get_args(tp)
    if origin is tuple:
        return items[0] if len(items) == 2 and items[1] is Ellipsis else None
    return items[0] if items else None


def is_upload(tp: Any) -> bool:
    """Whether ``tp`` takes a form's files: ``UploadFile``, ``list[UploadFile]``, either Optional."""
    tp = strip_annotated(tp)
    args = union_args(tp)
    if args is not None:
        others = [arg for arg in args if arg is not type(None)]
        return len(others) == 1 and is_upload(others[0])
    item = sequence_item(tp)
    if item is not None:
        tp = strip_annotated(item)
    return isinstance(tp, type) and issubclass(tp, UploadFile)


def gathered_class(tp: Any) -> Any:
    """The Struct, dataclass or TypedDict of ``Annotated[Model | None, Query()]`` (or ``Form()``)."""
    tp = strip_annotated(tp)
    members = union_args(tp)
    return tp if members is None else strip_annotated(next(one for one in members if one is not type(None)))
