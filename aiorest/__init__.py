"""aiorest: an asyncio HTTP/1.1 REST microframework with its own server.

The everyday names, re-exported from the packages that define them: a feature's other names are
imported from its package (``aiorest.security``, ``aiorest.middleware.sessions``, ``aiorest.db``;
see docs/internals.rst, "Public paths").
"""

from .app import App, ExceptionHandler, Hook, Lifespan, Middleware
from .http import (
    BackgroundTasksFull,
    ETag,
    EventSourceResponse,
    FileResponse,
    FormData,
    FormLimits,
    Headers,
    HTTPNotModified,
    JSONCodec,
    JSONResponse,
    Limits,
    MultiDict,
    Request,
    RequestTasks,
    Response,
    ServerSentEvent,
    State,
    StreamResponse,
    UploadFile,
    Uploads,
    WebSocket,
    WebSocketDisconnect,
    WebSocketLimits,
    check_preconditions,
    request_id,
)
from .http.exceptions import *  # noqa: F403  (the HTTPError family, listed once, in its __all__)
from .http.exceptions import __all__ as _exceptions_all
from .middleware import CORS, Compression, Decompression
from .middleware.idempotency import (
    Idempotency,
    IdempotencyStore,
    MemoryIdempotencyStore,
    PostgresIdempotencyStore,
    RedisIdempotencyStore,
)
from .middleware.sessions import (
    CookieSessionStore,
    PostgresSessionStore,
    RedisSessionStore,
    Session,
    SessionMiddleware,
    SessionStore,
)
from .routing import Convertor, Handler, NoMatchFound, Route, RouteOptions, Router
from .server import Server, run
from .typed import Body, Cookie, Form, Header, Query

__version__ = "0.1.0"

__all__ = [
    "App",
    "BackgroundTasksFull",
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
    "RequestTasks",
    "Response",
    "Route",
    "RouteOptions",
    "Router",
    "Server",
    "State",
    "StreamResponse",
    # server-sent events
    "EventSourceResponse",
    "ServerSentEvent",
    "UploadFile",
    "Uploads",
    "WebSocket",
    "WebSocketDisconnect",
    "WebSocketLimits",
    "FileResponse",
    "Form",
    "FormData",
    "FormLimits",
    "request_id",
    "run",
    *_exceptions_all,
    # conditional requests
    "ETag",
    "HTTPNotModified",
    "check_preconditions",
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
    "CookieSessionStore",
    "PostgresSessionStore",
    "RedisSessionStore",
    "Session",
    "SessionMiddleware",
    "SessionStore",
]
