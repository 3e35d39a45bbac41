"""aiorest: an asyncio HTTP/1.1 REST microframework with its own server.

Imported from the public paths (the shims among them), so that ``import aiorest`` also binds
``aiorest.exceptions``, ``aiorest.sessions`` and the others as before.
"""

from .app import App, ExceptionHandler, Hook, Lifespan, Middleware
from .compression import Compression, Decompression
from .cors import CORS
from .exceptions import *  # noqa: F403
from .http.datastructures import Headers, MultiDict, State
from .http.exceptions import __all__ as _exceptions_all
from .http.limits import Limits
from .http.request import Request
from .http.requestid import request_id
from .http.response import JSONResponse, Response, StreamResponse
from .idempotency import (
    Idempotency,
    IdempotencyStore,
    MemoryIdempotencyStore,
    PostgresIdempotencyStore,
    RedisIdempotencyStore,
)
from .jsoncodec import JSONCodec
from .routing import Handler, NoMatchFound, Route, RouteOptions, Router
from .routing.convertors import Convertor
from .server import Server, run
from .sessions import (
    CookieStore,
    PostgresStore,
    RedisStore,
    Session,
    SessionMiddleware,
    SessionStore,
)
from .typed import Body, Cookie, Header, Query

__version__ = "0.1.0"

__all__ = [
    "App",
    "Body",
    "Cookie",
    "Convertor",
    "ExceptionHandler",
    "Handler",
    "Header",
    "Headers",
    "Hook",
    "JSONCodec",
    "JSONResponse",
    "Lifespan",
    "Limits",
    "Middleware",
    "MultiDict",
    "NoMatchFound",
    "Query",
    "Request",
    "Response",
    "Route",
    "RouteOptions",
    "Router",
    "Server",
    "State",
    "StreamResponse",
    "request_id",
    "run",
    *_exceptions_all,
    "CORS",
    # compression
    "Compression",
    "Decompression",
    # idempotency keys
    "Idempotency",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "PostgresIdempotencyStore",
    "RedisIdempotencyStore",
    # sessions
    "CookieStore",
    "PostgresStore",
    "RedisStore",
    "Session",
    "SessionMiddleware",
    "SessionStore",
]
