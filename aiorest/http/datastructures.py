"""Multi-valued mappings for query strings and headers, and the state namespace."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

from .validators import check_validator

__all__ = ["MultiDict", "Headers", "State", "header_key", "raw_header", "raw_header_values"]

_T = TypeVar("_T")
_V = TypeVar("_V")


class MultiDict(Mapping[str, _V]):
    """An immutable mapping where a key may have several values, in order.

    ``md[key]`` and ``md.get(key)`` give the first value; ``md.getall(key)`` all of them.
    The query's values are ``str``; a form's (:class:`~aiorest.http.FormData`) also uploads.
    """

    __slots__ = ("_items", "_first")

    def __init__(self, items: Iterable[tuple[str, _V]] = ()) -> None:
        self._items = list(items)
        first: dict[str, _V] = {}
        for key, value in self._items:
            first.setdefault(key, value)
        self._first = first

    def __getitem__(self, key: str) -> _V:
        return self._first[key]

    # get and `in` from the dict itself: Mapping's would raise and catch a KeyError for each absent key,
    # as a typed handler's optional query parameters are on most requests (about 1 µs each).
    @overload
    def get(self, key: str, default: None = None) -> _V | None: ...
    @overload
    def get(self, key: str, default: _V | _T) -> _V | _T: ...
    def get(self, key: str, default: Any = None) -> Any:
        return self._first.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._first

    def __iter__(self) -> Iterator[str]:
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)

    def getall(self, key: str, default: list[_V] | None = None) -> list[_V]:
        """Every value of ``key``; ``default`` (or ``[]``) when absent."""
        values = [v for k, v in self._items if k == key]
        if values:
            return values
        return [] if default is None else default

    def multi_items(self) -> list[tuple[str, _V]]:
        """All ``(key, value)`` pairs, repeated keys included, in order."""
        return list(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MultiDict):
            return sorted(self._items) == sorted(other.multi_items())
        return super().__eq__(other)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._items!r})"


def header_key(name: str | bytes) -> bytes:
    """A header name as :func:`raw_header` looks it up: lower-case bytes."""
    return name.lower() if type(name) is bytes else name.lower().encode("latin-1")  # type: ignore[union-attr]


def raw_header(raw: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower-case) in a request's raw headers, without
    building :class:`Headers`: a request that needs one header pays for one scan."""
    size = len(name)
    for key, value in raw:
        if len(key) == size and key.lower() == name:
            return value
    return None


def raw_header_values(raw: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    """Every value of header ``name`` (lower-case) in a request's raw headers, in order."""
    size = len(name)
    return [value for key, value in raw if len(key) == size and key.lower() == name]


class Headers:
    """Case-insensitive, multi-valued HTTP headers, in the order given.

    ``headers["content-type"]`` gives the first value; ``getall`` every value.
    Mutating methods check that names are tokens and that values hold no
    control character and only Latin-1 (see ``check_header_value``), so that a
    header can never be injected into a response.
    """

    __slots__ = ("_list",)

    def __init__(self, headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> None:
        self._list: list[tuple[str, str, str]] = []  # (lower name, name, value)
        if headers is not None:
            items = headers.items() if type(headers) is dict or isinstance(headers, Mapping) else headers
            for name, value in items:
                self.add(name, value)

    @classmethod
    def from_raw(cls, raw: list[tuple[bytes, bytes]]) -> Headers:
        """Headers of a request's raw ``(name, value)`` byte pairs, decoded as Latin-1, unchecked:
        the parser already refused bad bytes."""
        self = cls.__new__(cls)
        self._list = [(n.decode("latin-1").lower(), n.decode("latin-1"), v.decode("latin-1")) for n, v in raw]
        return self

    def copy(self) -> Headers:
        """A copy: changing one leaves the other as it was."""
        copy = Headers.__new__(Headers)
        copy._list = list(self._list)
        return copy

    def __getitem__(self, name: str) -> str:
        lname = name.lower()
        for key, _, value in self._list:
            if key == lname:
                return value
        raise KeyError(name)

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: _T) -> str | _T: ...
    def get(self, name: str, default: Any = None) -> Any:
        lname = name.lower()  # as __getitem__, without raising and catching a KeyError for an absent name
        for key, _, value in self._list:
            if key == lname:
                return value
        return default

    def getall(self, name: str) -> list[str]:
        lname = name.lower()
        return [value for key, _, value in self._list if key == lname]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        lname = name.lower()
        return any(key == lname for key, _, _ in self._list)

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for key, _, _ in self._list:
            if key not in seen:
                seen.add(key)
                yield key

    def __len__(self) -> int:
        return len(self._list)

    def keys(self) -> list[str]:
        return list(self)

    def items(self) -> list[tuple[str, str]]:
        """Every ``(name, value)`` pair, repeated names included, names as given."""
        return [(name, value) for _, name, value in self._list]

    def field_lines(self, leave_out: frozenset[str] = frozenset()) -> str:
        """The fields as a message head writes them, ``Name: value\\r\\n`` each, in order, less those
        whose lower-case name is in ``leave_out`` (every value was checked when it was set)."""
        return "".join([f"{name}: {value}\r\n" for key, name, value in self._list if key not in leave_out])

    def field_lines_unless(self, refused: frozenset[str]) -> str | None:
        """:meth:`field_lines` of every field, or None if one's lower-case name is in ``refused``."""
        lines = []
        for key, name, value in self._list:
            if key in refused:
                return None
            lines.append(f"{name}: {value}\r\n")
        return "".join(lines)

    def add(self, name: str, value: str) -> None:
        """Append a value, keeping any that ``name`` already has."""
        _check_header(name, value)
        self._list.append((name.lower(), name, value))

    def __setitem__(self, name: str, value: str) -> None:
        """Replace every value of ``name`` with ``value``."""
        _check_header(name, value)
        lname = name.lower()
        self._list = [item for item in self._list if item[0] != lname]
        self._list.append((lname, name, value))

    def __delitem__(self, name: str) -> None:
        lname = name.lower()
        kept = [item for item in self._list if item[0] != lname]
        if len(kept) == len(self._list):
            raise KeyError(name)
        self._list = kept

    def discard(self, names: Iterable[str]) -> None:
        """Remove every value of each of ``names`` (any case); a name not there is no error."""
        if self._list:
            lower = {name.lower() for name in names}
            self._list = [item for item in self._list if item[0] not in lower]

    def extend(self, other: Headers) -> None:
        """Append every field of ``other`` (already checked when it was built), keeping those here."""
        self._list += other._list

    def setdefault(self, name: str, value: str) -> str:
        existing = self.get(name)
        if existing is None:
            self.add(name, value)
            return value
        return existing

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Headers):
            return NotImplemented
        return sorted((k, v) for k, _, v in self._list) == sorted((k.lower(), v) for k, v in other.items())

    def __repr__(self) -> str:
        return f"Headers({self.items()!r})"


_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


# RFC 9110, 5.5: a field value is visible characters, obs-text (0x80-0xFF), SP and
# HTAB. CR, LF or NUL would end the header early and start another; the rest of
# the controls are refused with them. The server encodes the head as Latin-1.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def check_header_value(value: str, what: str) -> None:
    """Refuse a value that cannot be sent in a header as it is; ``what`` names it in the error."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    # isprintable() is the quick pass: an ASCII value without tab or control passes it.
    if not value.isprintable() and _CONTROL.search(value) is not None:
        raise ValueError(f"invalid {what} {value!r}: control characters (CR, LF, NUL, ...) are not allowed")
    if not value.isascii():
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError(f"invalid {what} {value!r}: only Latin-1 characters are allowed") from None


def _check_header(name: str, value: str) -> None:
    if not name or not _TCHAR.issuperset(name):
        raise ValueError(f"invalid header name {name!r}")
    if type(value) is not str or not value.isprintable() or not value.isascii():  # the usual value passes
        check_header_value(value, f"header value for {name!r}")
    # An ETag or a Last-Modified is compared with the client's later: a bad one is refused when set.
    if name[0] in "EeLl" and name.lower() in ("etag", "last-modified"):
        check_validator(name.lower(), value)


class State:
    """A namespace for app or request state: ``state.db = pool`` or ``state["db"]``."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        # Only called for names not set; typed Any so that ``state.db`` type-checks.
        raise AttributeError(f"state has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value

    def __getitem__(self, key: str) -> Any:
        return self.__dict__[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.__dict__[key] = value

    def __delitem__(self, key: str) -> None:
        del self.__dict__[key]

    def __contains__(self, key: str) -> bool:
        return key in self.__dict__

    def __iter__(self) -> Iterator[str]:
        return iter(self.__dict__)

    def __len__(self) -> int:
        return len(self.__dict__)

    def get(self, key: str, default: Any = None) -> Any:
        return self.__dict__.get(key, default)

    def __repr__(self) -> str:
        return f"State({self.__dict__!r})"
