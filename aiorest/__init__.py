"""aiorest: an asyncio HTTP/1.1 REST microframework with its own server."""

from .app.application import App, ExceptionHandler, Hook, Lifespan, Middleware
from .http.datastructures import Headers, MultiDict, State
from .http.exceptions import *  # noqa: F403
from .http.exceptions import __all__ as _exceptions_all
from .http.jsoncodec import JSONCodec
from .http.limits import Limits
from .http.request import Request
from .http.requestid import request_id
from .http.response import JSONResponse, Response, StreamResponse
from .middleware.compression import Compression, Decompression
from .middleware.cors import CORS
from .middleware.sessions.middleware import (
    CookieStore,
    PostgresStore,
    RedisStore,
    Session,
    SessionMiddleware,
    SessionStore,
)
from .routing.convertors import Convertor
from .routing.route import Handler, NoMatchFound, Route, RouteOptions, Router
from .server.server import Server, run
from .typed.declare import Body, Cookie, Header, Query

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
    # sessions
    "CookieStore",
    "PostgresStore",
    "RedisStore",
    "Session",
    "SessionMiddleware",
    "SessionStore",
]
