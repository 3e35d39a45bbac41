"""Typed handlers: what a handler takes and returns, declared by its type hints.

A handler's signature is read once, when its route is registered in an App:
each parameter besides the request gets its source (path, query, header,
cookie, body or form), its name on the wire and a checked type, and the return
annotation may name a response model. A handler that takes only the request,
returns no model and whose route declares no status or headers is called as it
is: it pays nothing. Any other is wrapped in a
:class:`~aiorest.typed.TypedEndpoint`, which binds the parameters from the
request, validates them with msgspec (decoders built at registration) and
encodes the result.

What was declared stays on the route as a :class:`HandlerSignature`, in a
structured form (for documents such as OpenAPI).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import functools
import inspect
import operator
import types
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, get_args, get_origin

from ..http.exceptions import VALIDATION_MESSAGE
from ..http.request import Request
from ..http.response import Response
from ..routing.convertors import Convertor, python_type
from ..routing.route import describe
from .annotations import hinted as _hinted
from .annotations import is_upload, require_msgspec
from .annotations import sequence_item as _sequence_item
from .annotations import strip_annotated as _strip
from .annotations import union_args as _union_args
from .markers import Body, Form, Marker, Source

try:
    import msgspec
except ImportError:  # an optional dependency: typed handlers say so when registered
    msgspec = None  # type: ignore[assignment]

__all__ = [
    "Parameter",
    "HandlerSignature",
    "read_signature",
    "VALIDATION_MESSAGE",
]

# -- what was declared ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Parameter:
    """One declared input of a typed handler.

    ``name`` is the handler's parameter; ``key`` its name on the wire (the path
    parameter, query key, header name in lower case, cookie name, form field; ``""`` for the
    body and for a gathered model). ``annotation`` is the declared type, ``Annotated`` constraints kept.
    ``default`` is meaningful only when ``required`` is False. The marker
    (:class:`Header`, ...) is left out of ``annotation``: ``source`` says it. ``fields``: for
    query parameters or a form gathered into one Struct, dataclass or TypedDict, one
    Parameter a field (``name`` is then the field's name).
    """

    name: str
    source: Source
    key: str
    annotation: Any
    required: bool = True
    default: Any = None
    fields: tuple[Parameter, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerSignature:
    """What a typed handler declares, read once at registration.

    ``request``: the name it takes the request under (None if it does not).
    ``returns``: the response model (the return annotation when it names one),
    else None. ``status``, ``headers`` and ``strict_content_type``: declared on
    the route.
    """

    handler: Any
    parameters: tuple[Parameter, ...]
    request: str | None
    returns: Any
    status: int | None
    headers: Mapping[str, str]
    strict_content_type: bool = True


# -- registration ----------------------------------------------------------------------

_SCALARS = frozenset(
    {str, int, float, bool, uuid.UUID, decimal.Decimal, datetime.datetime, datetime.date, datetime.time}
)
_NO_HEADERS: Mapping[str, str] = types.MappingProxyType({})


class _Declared(TypeError):
    """A declaration that cannot work; ``read_signature`` names the handler in the message."""


def read_signature(
    handler: Callable[..., Any],
    method: str,
    path: str,
    path_params: Sequence[tuple[str, Convertor]],
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
    strict_content_type: bool = True,
) -> HandlerSignature | None:
    """Read ``handler``'s declarations for the route ``method path``.

    Returns None for a handler that takes only the request and returns no
    model, on a route with no declared status or headers: it is called as it
    is. Otherwise its signature, for a :class:`~aiorest.typed.TypedEndpoint`
    to bind. A declaration that cannot work raises TypeError naming the handler
    and the parameter. ``status`` and ``headers`` were checked by the Route.
    """
    checked_headers: Mapping[str, str] = headers or _NO_HEADERS
    where = f"handler {describe(handler)} of {method} {path}"
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where}: cannot read its signature: {exc}") from None
    params = list(signature.parameters.values())
    plain_call = (
        len(params) == 1
        and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD)
        and status is None
        and not checked_headers
    )
    if plain_call and params[0].annotation is params[0].empty and signature.return_annotation is signature.empty:
        return None  # the common untyped handler: not even its annotations are resolved
    try:
        hints = typing.get_type_hints(_hinted(handler), include_extras=True)
    except Exception as exc:
        if plain_call and (params[0].name == "request" or "Request" in str(params[0].annotation)):
            return None  # annotations it cannot resolve: called as before typed handlers
        raise TypeError(f"{where}: cannot resolve its annotations: {exc!r}") from None
    returns = hints.get("return")
    if plain_call and _is_request(params[0], hints, only=True) and not _names_model(returns):
        return None
    try:
        parameters, request_name = _read(params, hints, dict(path_params))
        model = _response_model(returns)
    except _Declared as exc:
        raise TypeError(f"{where}: {exc}") from None
    return HandlerSignature(handler, parameters, request_name, model, status, checked_headers, strict_content_type)


def _is_request(param: inspect.Parameter, hints: Mapping[str, Any], only: bool) -> bool:
    hint = hints.get(param.name)
    if isinstance(hint, type) and issubclass(hint, Request):
        return True
    if _marker(hint) is not None:
        return False
    return param.name == "request" or (only and (hint is None or hint is Any))


def _read(
    params: list[inspect.Parameter], hints: Mapping[str, Any], path_params: Mapping[str, Convertor]
) -> tuple[tuple[Parameter, ...], str | None]:
    """The declared parameters, and the name the request is taken under."""
    require_msgspec(
        "typed handlers (typed parameters, a response model, a declared status or headers) need msgspec",
        "typed",
        _Declared,
    )
    request_name = None
    declared: list[Parameter] = []
    for param in params:
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise _Declared(f"parameter {param.name!r}: a typed handler takes named parameters only, not {param.kind}")
        if request_name is None and _is_request(param, hints, only=len(params) == 1):
            request_name = param.name
            continue
        declared.append(_parameter(param, hints.get(param.name), path_params))
    bodies = [p.name for p in declared if p.source == "body"]
    if len(bodies) > 1:
        raise _Declared(f"parameters {bodies[0]!r} and {bodies[1]!r} both read the body; a handler has one body")
    forms = [p.name for p in declared if p.source == "form"]
    if bodies and forms:
        raise _Declared(f"parameters {bodies[0]!r} and {forms[0]!r} read the body as JSON and as a form: choose one")
    models = [p.name for p in declared if p.source == "form" and not p.key]
    if models and len(forms) > 1:
        other = next(name for name in forms if name != models[0])
        raise _Declared(f"parameter {models[0]!r} gathers the form into a model: make {other!r} one of its fields")
    return tuple(declared), request_name


def _response_model(returns: Any) -> Any:
    if not _names_model(returns):
        return None
    model = _without_responses(returns)
    _check_schema(model, "the return annotation")
    return model


def _parameter(param: inspect.Parameter, hint: Any, path_params: Mapping[str, Convertor]) -> Parameter:
    name = param.name
    required = param.default is param.empty
    default = None if required else param.default
    marker = _marker(hint)
    if marker is not None:
        hint = _without_marker(hint)
    what = f"parameter {name!r}"
    if marker is None and name in path_params:
        if not required:
            raise _Declared(f"{what} is a path parameter: it cannot have a default")
        if hint is not None:
            _check_path_type(what, hint, path_params[name])
        return Parameter(name, "path", name, hint, True, None)
    if hint is None:
        raise _Declared(
            f"{what} has no annotation and matches no path parameter of the route: annotate it "
            f"(a query parameter: '{name}: int = 10'), or name it after a path parameter"
        )
    base = _strip(hint)
    args = _union_args(base)
    if args is not None and len(args) == 2 and type(None) in args:
        base = _strip(args[0] if args[1] is type(None) else args[1])  # Optional: its type says the source
    if isinstance(marker, Form) or (marker is None and is_upload(hint)):
        return _form_parameter(what, name, marker, hint, base, required, default)
    if isinstance(marker, Body) or (marker is None and _is_model_class(base)):
        _check_schema(hint, what)
        return Parameter(name, "body", "", hint, required, default)
    source: Source = "query" if marker is None else marker.source
    if source == "query" and _is_model_class(base):
        return Parameter(name, "query", "", hint, required, default, _gathered_fields(what, base, "query"))
    key = name
    if marker is not None and marker.alias:
        key = marker.alias
    elif source == "header":
        key = name.replace("_", "-")
    if source == "header":
        key = key.lower()
    _check_scalar(what, hint, many_allowed=source != "cookie")
    return Parameter(name, source, key, hint, required, default)


def _form_parameter(
    what: str, name: str, marker: Marker | None, hint: Any, base: Any, required: bool, default: Any
) -> Parameter:
    """A form gathered into a Struct, dataclass or TypedDict, or one field (or file) of it."""
    if _is_model_class(base):
        return Parameter(name, "form", "", hint, required, default, _gathered_fields(what, base, "form"))
    _check_field(what, hint, "form")
    key = marker.alias if marker is not None and marker.alias else name
    return Parameter(name, "form", key, hint, required, default)


def _marker(hint: Any) -> Marker | None:
    if get_origin(hint) is Annotated:
        for extra in hint.__metadata__:
            if isinstance(extra, Marker):
                return extra
    return None


def _without_marker(hint: Any) -> Any:
    """``Annotated[int, Header(), Meta(ge=1)]`` is ``Annotated[int, Meta(ge=1)]``: the source is said elsewhere."""
    kept = tuple(extra for extra in hint.__metadata__ if not isinstance(extra, Marker))
    return Annotated[(hint.__origin__, *kept)] if kept else hint.__origin__


def _is_model_class(tp: Any) -> bool:
    """A Struct, dataclass, TypedDict or NamedTuple: an object, not a value."""
    if not isinstance(tp, type):
        return False
    if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp):
        return True
    if issubclass(tp, tuple) and hasattr(tp, "_fields"):
        return True
    return any(cls.__name__ == "Struct" and cls.__module__.startswith("msgspec") for cls in tp.__mro__)


def _names_model(annotation: Any) -> bool:
    """Whether a return annotation names a response model (somewhere inside it)."""
    if annotation is None:
        return False
    tp = _strip(annotation)
    if _is_model_class(tp):
        return True
    return any(_names_model(arg) for arg in get_args(tp) if not isinstance(arg, (str, int, float, bool, bytes)))


def _without_responses(annotation: Any) -> Any:
    """``Model | Response`` is ``Model``: a Response returned is sent as it is."""
    args = _union_args(_strip(annotation))
    if args is None:
        return annotation
    kept = [arg for arg in args if not (isinstance(arg, type) and issubclass(arg, Response))]
    return functools.reduce(operator.or_, kept)


def _is_scalar(tp: Any) -> bool:
    tp = _strip(tp)
    args = _union_args(tp)
    if args is not None:
        return all(arg is type(None) or _is_scalar(arg) for arg in args)
    if get_origin(tp) is Literal:
        return True
    return tp in _SCALARS or (isinstance(tp, type) and issubclass(tp, enum.Enum))


def _check_scalar(what: str, hint: Any, many_allowed: bool, files: bool = False) -> None:
    if _is_scalar(hint):
        return
    item = _sequence_item(hint)
    if item is not None and _is_scalar(item) and many_allowed:
        return
    kinds = "a str, int, float, bool, UUID, Decimal, date/time, Enum or Literal"
    if many_allowed:
        kinds += " (or a list of them, for repeated keys)"
    if files:
        kinds += ", or an UploadFile (list[UploadFile], UploadFile | None)"
    raise _Declared(
        f"{what}: unsupported annotation {hint!r}: it must be {kinds}; "
        "a Struct, dataclass or TypedDict is the JSON body, Annotated[..., Body()] marks another body type"
    )


def _check_path_type(what: str, hint: Any, convertor: Convertor) -> None:
    expected = python_type(convertor)
    if expected is None or expected is Any:  # a custom converter that does not say
        return
    if _strip(hint) is not expected:
        raise _Declared(
            f"{what} is annotated {hint!r}, but its path converter gives {getattr(expected, '__name__', expected)}: "
            "make them agree"
        )


def _check_field(what: str, hint: Any, source: Source) -> None:
    """A query parameter, or a form's field: a scalar or a list of them; a form's may be files."""
    if source != "form" or not is_upload(hint):
        _check_scalar(what, hint, many_allowed=True, files=source == "form")


def _gathered_fields(what: str, cls: type, source: Source) -> tuple[Parameter, ...]:
    """The fields of a Struct, dataclass or TypedDict that gathers query parameters, or a form."""
    fields: list[Parameter] = []
    info = msgspec.inspect.type_info(cls)
    if not isinstance(info, (msgspec.inspect.StructType, msgspec.inspect.DataclassType, msgspec.inspect.TypedDictType)):
        what_gathers = "query parameters gather" if source == "query" else "a form gathers"
        raise _Declared(f"{what}: {what_gathers} into a Struct, a dataclass or a TypedDict, not {cls!r}")
    hints = typing.get_type_hints(cls, include_extras=True)
    for field in info.fields:
        hint = hints[field.name]
        _check_field(f"{what}, field {field.name!r}", hint, source)
        default = None if field.default is msgspec.NODEFAULT else field.default
        fields.append(Parameter(field.name, source, field.encode_name, hint, field.required, default))
    return tuple(fields)


def _check_schema(hint: Any, what: str) -> None:
    """msgspec must be able to decode or encode the type, and to describe it as JSON Schema."""
    try:
        msgspec.json.schema(hint)
    except (TypeError, ValueError, NameError) as exc:
        first_line = str(exc).splitlines()[-1] if str(exc) else type(exc).__name__
        if "UploadFile" in first_line:  # a file comes in a form, never in JSON
            first_line += "; files come in a form: Annotated[..., Form()]"
        raise _Declared(f"{what}: unsupported annotation {hint!r}: {first_line}") from None
