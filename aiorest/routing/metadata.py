"""What a handler says of itself, for documents such as OpenAPI.

Decorators of the layers above (``login_required``, ``raises``,
``idempotency_exempt``) mark the handler here; the OpenAPI generator and the
middleware that bind themselves to routes at startup read the marks. Nothing
here runs per request.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Any, TypeVar

from ..http.exceptions import HTTPError

__all__ = [
    "SECURED",
    "raises",
    "mark_secured",
    "is_secured",
    "raised",
    "mark_idempotency_exempt",
    "is_idempotency_exempt",
]

#: The attribute under which :func:`~aiorest.security.login_required` and
#: :func:`~aiorest.security.requires` mark a handler as needing credentials: its
#: operation lists the security schemes of the ``Auth`` middleware around it.
SECURED = "__aiorest_secured__"
_RAISES = "__aiorest_raises__"
_IDEMPOTENCY_EXEMPT = "__aiorest_idempotency_exempt__"

_F = TypeVar("_F", bound=Callable[..., Any])


def raises(*errors: type[HTTPError]) -> Callable[[_F], _F]:
    """Say in the OpenAPI document that a handler may answer with these errors.

    Each :class:`~aiorest.HTTPError` subclass adds its ``status`` to the
    operation's responses, in the project's error shape: ``@raises(HTTPConflict)``
    under the route's decorator. The handler is returned as it is; calling it
    costs nothing more.
    """
    for error in errors:
        if not (isinstance(error, type) and issubclass(error, HTTPError)):
            raise TypeError(f"raises() takes HTTPError subclasses, not {error!r}")
        HTTPStatus(error.status)  # a status the document can describe: ValueError otherwise

    def declare(handler: _F) -> _F:
        setattr(handler, _RAISES, (*raised(handler), *errors))
        return handler

    return declare


def raised(handler: object) -> tuple[type[HTTPError], ...]:
    """The errors ``handler`` was declared to answer with (:func:`raises`), in order."""
    return tuple(getattr(handler, _RAISES, ()))


def mark_secured(handler: _F) -> _F:
    """Mark ``handler`` as needing credentials (see :data:`SECURED`)."""
    setattr(handler, SECURED, True)
    return handler


def is_secured(handler: object) -> bool:
    return bool(getattr(handler, SECURED, False))


def mark_idempotency_exempt(handler: _F) -> _F:
    """Mark ``handler``'s routes as never keyed by :class:`~aiorest.Idempotency` (``idempotency_exempt``)."""
    setattr(handler, _IDEMPOTENCY_EXEMPT, True)
    return handler


def is_idempotency_exempt(handler: object) -> bool:
    return bool(getattr(handler, _IDEMPOTENCY_EXEMPT, False))
