"""Routes, convertors and the compiled route table."""

from .convertors import Convertor
from .route import (
    HANDLER_MIDDLEWARE,
    METHODS,
    PREFLIGHT_MIDDLEWARE,
    ROUTE_BINDING,
    Handler,
    Middleware,
    NoMatchFound,
    Route,
    RouteOptions,
    Router,
)
from .table import RouteTable
from .websocket import OriginPolicy, WebSocketEndpoint, WebSocketHandler

__all__ = [
    "Route",
    "Router",
    "RouteOptions",
    "RouteTable",
    "NoMatchFound",
    "Convertor",
    "Handler",
    "Middleware",
    "METHODS",
    "HANDLER_MIDDLEWARE",
    "PREFLIGHT_MIDDLEWARE",
    "ROUTE_BINDING",
    "OriginPolicy",
    "WebSocketEndpoint",
    "WebSocketHandler",
]
