"""HTTP messages: the request, the responses, headers, cookies, errors and the JSON codec."""

from .background import BackgroundTasks, BackgroundTasksFull, RequestTasks
from .conditional import HTTPNotModified, check_preconditions
from .datastructures import Headers, MultiDict, State
from .exceptions import *  # noqa: F403  (the HTTPError family, listed once, in exceptions.__all__)
from .exceptions import __all__ as _errors
from .files import FileResponse
from .formlimits import FormLimits
from .forms import FormData
from .interfaces import RouteMatch, SessionData
from .jsonbody import bad_body
from .jsoncodec import JSONCodec, get_codec
from .limits import Limits
from .request import Request
from .requestid import request_id
from .response import JSONResponse, Response, StreamResponse, add_vary
from .sse import EventSourceResponse, EventStreamParser, ServerSentEvent
from .uploads import UploadFile, Uploads
from .validators import ETag, parse_etags
from .websocket import WebSocket, WebSocketChannel, WebSocketDisconnect, WebSocketLimits, WebSocketUpgrade

__all__ = [
    "BackgroundTasks",
    "BackgroundTasksFull",
    "ETag",
    "EventSourceResponse",
    "EventStreamParser",
    "HTTPNotModified",
    "FileResponse",
    "FormData",
    "FormLimits",
    "Headers",
    "JSONCodec",
    "JSONResponse",
    "Limits",
    "MultiDict",
    "Request",
    "RequestTasks",
    "Response",
    "RouteMatch",
    "ServerSentEvent",
    "SessionData",
    "State",
    "StreamResponse",
    "UploadFile",
    "Uploads",
    "WebSocket",
    "WebSocketChannel",
    "WebSocketDisconnect",
    "WebSocketLimits",
    "WebSocketUpgrade",
    "add_vary",
    "bad_body",
    "check_preconditions",
    "get_codec",
    "parse_etags",
    "request_id",
    *_errors,
]
