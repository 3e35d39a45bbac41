"""The session of one request: a mapping of JSON values whose changes are tracked.

Apart from the middleware and the stores (:mod:`aiorest.middleware.sessions`). The request,
which holds its session, knows only its base, ``aiorest.http.request.SessionData``.
"""

from __future__ import annotations

import json
import secrets as _secrets
from collections.abc import Iterator
from typing import Any

from ...http.request import SessionData

__all__ = ["Session", "new_session_id"]


def new_session_id() -> str:
    """A random session id: 256 bits, URL-safe base64 (43 characters)."""
    return _secrets.token_urlsafe(32)


class Session(SessionData):
    """The session of one request: string keys, JSON values.

    Changes are tracked key by key, so that an unchanged session writes nothing
    and a server-side store writes only the keys that changed. A value changed
    in place (``session["cart"].append(item)``) is not seen: assign it again.
    """

    def __init__(self, data: dict[str, Any] | None = None, session_id: str | None = None) -> None:
        self._data: dict[str, Any] = data if data is not None else {}
        self._loaded_id = session_id  # the id the client sent; None for a new session
        self.id: str = session_id if session_id is not None else new_session_id()
        self._changed: set[str] = set()
        self._deleted: set[str] = set()
        self._fresh = session_id is None  # the store must write the whole session under self.id

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"session keys are strings, not {type(key).__name__}")
        try:
            # Here, where the bug is, rather than when the session is saved. NaN and
            # Infinity are not JSON: PostgreSQL's jsonb, and other readers, refuse them.
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"session[{key!r}] must be a JSON value: {exc}") from None
        self._data[key] = value
        self._changed.add(key)
        self._deleted.discard(key)

    def __delitem__(self, key: str) -> None:
        del self._data[key]
        self._changed.discard(key)
        self._deleted.add(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"<Session {len(self._data)} keys>"

    def rotate(self) -> None:
        """Give the session a new id, keeping its data; the old id stops working.

        Call it when the user logs in, so that an id planted in the browser
        before (session fixation) does not become a logged-in session.
        """
        self.id = new_session_id()
        self._fresh = True

    def invalidate(self) -> None:
        """Drop the data, delete the server's record and expire the cookie (logout).

        Keys set afterwards start a new session, under a new id.
        """
        self._data.clear()
        self._changed.clear()
        self._deleted.clear()
        self.id = new_session_id()
        self._fresh = True

    @property
    def loaded_id(self) -> str | None:
        """The id the client sent, which a store loaded; None for a new session."""
        return self._loaded_id

    @property
    def fresh(self) -> bool:
        """Whether a store must write the whole session under :attr:`id` (new, rotated or invalidated)."""
        return self._fresh

    def changes(self) -> tuple[frozenset[str], frozenset[str]]:
        """The keys set and the keys deleted since the session was loaded, for a store
        that writes only what changed."""
        return frozenset(self._changed), frozenset(self._deleted)

    @property
    def modified(self) -> bool:
        """Whether the response must write the session (or expire its cookie)."""
        if self._fresh:
            return bool(self._data) or self._loaded_id is not None
        return bool(self._changed or self._deleted)
