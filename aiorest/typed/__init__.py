"""Typed handlers: declared inputs and outputs, bound with msgspec, and the OpenAPI document they give."""

from .binding import TypedEndpoint
from .declare import VALIDATION_MESSAGE, Body, Cookie, HandlerSignature, Header, Parameter, Query, read_signature

__all__ = [
    "Query",
    "Header",
    "Cookie",
    "Body",
    "Parameter",
    "HandlerSignature",
    "read_signature",
    "VALIDATION_MESSAGE",
    "TypedEndpoint",
]
