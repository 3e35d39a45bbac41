"""Path templates: ``/notes/{note_id:int}`` compiled into a regex, its parameters and the pieces ``url_for`` joins."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .convertors import Convertor, route_regex

__all__ = ["PathTemplate", "compile_path"]

_T = TypeVar("_T", bound="PathTemplate")

_PARAM_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z_][A-Za-z0-9_]*))?\}")


@dataclass(slots=True)
class PathTemplate:
    """A compiled path template: its regex, its parameters and the pieces ``url_for`` joins."""

    template: str
    regex: str
    params: list[tuple[str, Convertor]]
    pieces: list[str | tuple[str, Convertor]]

    @property
    def openapi_path(self) -> str:
        """The template as OpenAPI writes it: ``/notes/{note_id}``, converters left out."""
        return "".join(piece if isinstance(piece, str) else f"{{{piece[0]}}}" for piece in self.pieces)

    def convert(self, texts: Iterable[str]) -> dict[str, Any]:
        return {name: conv.convert(text) for (name, conv), text in zip(self.params, texts, strict=True)}


def compile_path(template: str, convertors: Mapping[str, Convertor], kind: type[_T]) -> _T:
    regex: list[str] = []
    pieces: list[str | tuple[str, Convertor]] = []
    params: list[tuple[str, Convertor]] = []
    pos = 0
    for match in _PARAM_RE.finditer(template):
        literal = template[pos : match.start()]
        if "{" in literal or "}" in literal:
            raise ValueError(f"malformed parameter in route path {template!r}")
        name, conv_name = match.group(1), match.group(2) or "str"
        if any(name == seen for seen, _ in params):
            raise ValueError(f"parameter {name!r} appears twice in route path {template!r}")
        try:
            conv = convertors[conv_name]
        except KeyError:
            raise ValueError(f"unknown converter {conv_name!r} in route path {template!r}") from None
        regex.append(re.escape(literal))
        regex.append(f"({route_regex(conv_name, conv)})")
        pieces.append(literal)
        pieces.append((name, conv))
        params.append((name, conv))
        pos = match.end()
    tail = template[pos:]
    if "{" in tail or "}" in tail:
        raise ValueError(f"malformed parameter in route path {template!r}")
    regex.append(re.escape(tail))
    pieces.append(tail)
    return kind(template, "".join(regex), params, pieces)
