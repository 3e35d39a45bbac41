"""Sessions: ``request.session``, a mapping of JSON values kept across requests.

:class:`SessionMiddleware` puts the session on the request and, after the
handler, writes it back only if it changed. Where the data lives is its store's
business (:mod:`.stores`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...http.cookies import SameSite, format_set_cookie
from .session import Session
from .stores import COOKIE_LIMIT, SessionStore

if TYPE_CHECKING:
    from ...http.request import Request
    from ...http.response import Response
    from ...routing.route import Handler

__all__ = ["SessionMiddleware"]


class SessionMiddleware:
    """Middleware that gives ``request.session`` to the handlers it wraps.

    The cookie is ``HttpOnly``, ``SameSite=Lax``, ``Path=/``, lasts ``max_age``
    seconds from the last change, and is ``Secure`` when the request came over
    https (``request.scheme``, which trusted proxies set) unless ``secure`` says
    otherwise. The session is written only when the handler returns a response:
    a raised error saves none of the request's changes.
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        cookie_name: str = "session",
        max_age: int = 14 * 24 * 3600,
        path: str = "/",
        domain: str | None = None,
        secure: bool | None = None,
        httponly: bool = True,
        samesite: SameSite | None = "lax",
    ) -> None:
        if not isinstance(max_age, int) or isinstance(max_age, bool) or max_age <= 0:
            raise ValueError(f"max_age must be a positive number of seconds, not {max_age!r}")
        format_set_cookie(cookie_name, "", path=path, domain=domain, samesite=samesite)  # checks them now
        self.store = store
        self.cookie_name = cookie_name
        self.max_age = max_age
        self.path = path
        self.domain = domain
        self.secure = secure
        self.httponly = httponly
        self.samesite = samesite
        self._opener = self._open  # bound once: what request.session calls

    def readiness_checks(self) -> dict[str, Callable[[], Awaitable[object]]]:
        """What ``/readyz`` checks for this middleware (the app collects it): its store, if it has a service."""
        ping = getattr(self.store, "ping", None)
        return {} if ping is None else {"session store": ping}

    async def __call__(self, request: Request, handler: Handler) -> Response:
        if not request.attach_session(self._opener):  # an outer one already serves this request
            return await handler(request)  # type: ignore[no-any-return]
        if not self.store.lazy:
            value = request.cookies.get(self.cookie_name)
            if value is not None:
                request.open_session(await self.store.load(value, self.max_age) or Session())
        response: Response = await handler(request)
        session = request.opened_session
        if isinstance(session, Session) and session.modified:
            await self._commit(request, session, response)
        return response

    def _open(self, request: Request) -> Session:
        """The session of a request whose session nothing loaded yet (``request.session``)."""
        if self.store.lazy:
            value = request.cookies.get(self.cookie_name)
            if value is not None:
                return self.store.load_now(value, self.max_age) or Session()
        return Session()

    async def _commit(self, request: Request, session: Session, response: Response) -> None:
        old = session.loaded_id
        if old is not None and old != session.id:  # rotated or invalidated: the old id dies
            await self.store.delete(old)
        secure = request.scheme == "https" if self.secure is None else self.secure
        attributes: dict[str, Any] = dict(
            path=self.path, domain=self.domain, secure=secure, httponly=self.httponly, samesite=self.samesite
        )
        if session.fresh and not session:  # invalidated, and nothing set since: no session at all
            response.delete_cookie(self.cookie_name, **attributes)
            return
        value = await self.store.save(session, self.max_age)
        if len(self.cookie_name) + 1 + len(value) > COOKIE_LIMIT:
            raise ValueError(
                f"the session cookie would be {len(self.cookie_name) + 1 + len(value)} bytes, over the"
                f" {COOKIE_LIMIT} browsers keep: store less in the session, or use a server-side store"
            )
        response.set_cookie(self.cookie_name, value, max_age=self.max_age, **attributes)
