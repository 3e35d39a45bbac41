"""Typed handlers: declared inputs and outputs, bound with msgspec, and the OpenAPI document they give."""

from .binding import TypedEndpoint
from .declare import VALIDATION_MESSAGE, HandlerSignature, Parameter, read_signature
from .markers import Body, Cookie, Form, Header, Query
from .openapi import OPENAPI_VERSION, SECURED, HasRoutes, build_openapi, raises

__all__ = [
    "Query",
    "Header",
    "Cookie",
    "Body",
    "Form",
    "Parameter",
    "HandlerSignature",
    "read_signature",
    "VALIDATION_MESSAGE",
    "TypedEndpoint",
    "build_openapi",
    "raises",
    "HasRoutes",
    "OPENAPI_VERSION",
    "SECURED",
]
