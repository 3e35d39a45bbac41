"""An OpenAPI 3.1 document built from a route table, and the routes that serve it.

The document is read off what registration already knows: each route's compiled
path template and converters, the :class:`~aiorest.typed.HandlerSignature` of a
typed handler, and the marks decorators left on handlers
(:mod:`aiorest.routing.metadata`: ``raises``, ``login_required``). Schemas are
msgspec's JSON Schema, made for every type at once so that each Struct is one
component under ``#/components/schemas``.

The interactive docs (Swagger UI, ReDoc) are served from the files of the
``openapi-ui-bundles`` package, never from a CDN: an app deployed where the
internet is out of reach keeps its docs.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Literal

from ..http.response import Response
from ..http.sse import EventSourceResponse
from ..http.uploads import UploadFile
from ..routing.convertors import Convertor, python_type
from ..routing.metadata import SECURED, is_secured, raised, raises
from ..routing.table import RouteTable
from ..routing.websocket import WebSocketEndpoint
from .annotations import gathered_class, hinted, is_upload, require_msgspec, strip_annotated, union_args
from .declare import VALIDATION_MESSAGE, HandlerSignature, Parameter
from .docpages import DocsEndpoint
from .doctext import described, docstring

if TYPE_CHECKING:
    from ..routing.paths import PathTemplate
    from ..routing.route import Middleware, Route

try:
    import msgspec
except ImportError:  # an optional dependency: the document says so when asked for
    msgspec = None  # type: ignore[assignment]

__all__ = ["build_openapi", "raises", "OPENAPI_VERSION", "SECURED"]

#: The version of the OpenAPI specification the document follows.
OPENAPI_VERSION = "3.1.0"

_REF = "#/components/schemas/{name}"
_NEEDS_MSGSPEC = "the OpenAPI document needs msgspec for its JSON Schemas"
_JSON = "application/json"
_NO_CONTENT = frozenset({204, 304})
# The error answers, by status: their components under #/components/responses. 405
# answers a method a path lacks, which has no operation: it is in the components only.
_ERRORS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    415: "UnsupportedMediaType",
    422: "ValidationFailed",
}


class HasRoutes(typing.Protocol):
    """An app, as far as its document goes: its route table and the middleware around every route."""

    router: RouteTable
    middleware: Sequence[Middleware]


def build_openapi(
    router: RouteTable | HasRoutes,
    middleware: Sequence[Middleware] = (),
    *,
    title: str,
    version: str,
    description: str | None = None,
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``router``'s routes (see :meth:`aiorest.App.openapi`).

    ``middleware``: the app's, around every route; the innermost that describes
    security schemes (``Auth``) gives those of the operations marked secured.
    ``router`` may also be the app itself (anything with ``router`` and
    ``middleware``), as in ``build_openapi(app, title=..., version=...)``.
    """
    if not isinstance(router, RouteTable):
        app = router
        router, middleware = app.router, [*app.middleware, *middleware]
    require_msgspec(_NEEDS_MSGSPEC, "openapi")
    routes = [route for route in router.routes() if not isinstance(route.handler, DocsEndpoint)]
    types = _Types()
    error, validation = _error_types()
    error_ref, validation_ref = types.add(error), types.add(validation)
    operations = [(route, _Operation(route, router.template(route.path), types)) for route in routes]
    schemas, components = types.resolve()

    paths: dict[str, dict[str, Any]] = {}
    operation_ids: set[str] = set()
    tags: dict[str, None] = {}
    security_schemes: dict[str, Any] = {}
    for route, operation in operations:
        built = operation.build(schemas)
        # a WebSocket route answers a plain GET 426, a page of another origin 403 (docs/websockets.rst)
        implied = (403, 426) if operation.websocket else ()
        for status in (*(int(error_class.status) for error_class in raised(operation.handler)), *implied):
            answer: dict[str, Any] = {"description": HTTPStatus(status).phrase}
            if status in _ERRORS:
                answer = {"$ref": f"#/components/responses/{_ERRORS[status]}"}
            elif status >= 400:  # a 304 (HTTPNotModified) has no body
                answer["content"] = {_JSON: {"schema": schemas[error_ref]}}
            built["responses"].setdefault(str(status), answer)
        if is_secured(operation.handler):
            schemes = _security_schemes((*middleware, *route.middleware))
            if schemes:
                built["security"] = [{name: []} for name in schemes]  # any one of them
                security_schemes.update(schemes)
        built["operationId"] = _unique(operation.operation_id, route.method, operation_ids)
        if operation.tag is not None:
            built["tags"] = [operation.tag]
            tags[operation.tag] = None
        paths.setdefault(operation.template.openapi_path, {})[route.method.lower()] = built

    info: dict[str, Any] = {"title": title, "version": version}
    if description:
        info["description"] = description
    document: dict[str, Any] = {"openapi": OPENAPI_VERSION, "info": info}
    if tags:
        document["tags"] = [{"name": tag} for tag in tags]
    document["paths"] = paths
    responses = {
        name: {
            "description": HTTPStatus(status).phrase,
            "content": {_JSON: {"schema": schemas[validation_ref if status == 422 else error_ref]}},
        }
        for status, name in _ERRORS.items()
    }
    document["components"] = {"schemas": components, "responses": responses}
    if security_schemes:
        document["components"]["securitySchemes"] = security_schemes
    return document


def _security_schemes(middleware: Iterable[Any]) -> dict[str, Any]:
    """The security schemes of the innermost middleware that describes some (``Auth``: its identity policy's)."""
    found: dict[str, Any] = {}
    for one in middleware:
        describe = getattr(one, "openapi_security_schemes", None)
        if describe is not None:
            found = describe()
    return found


class _Types:
    """Every type the document describes, turned into schemas by one msgspec call."""

    def __init__(self) -> None:
        self._types: list[Any] = []

    def add(self, tp: Any) -> int:
        self._types.append(tp)
        return len(self._types) - 1

    def resolve(self) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
        schemas, components = msgspec.json.schema_components(self._types, schema_hook=_file_schema, ref_template=_REF)
        return schemas, {name: described(_file_fields(schema)) for name, schema in components.items()}


_BINARY = {"type": "string", "format": "binary"}


def _file_schema(tp: Any) -> dict[str, Any]:
    """An upload is a file: how OpenAPI says it, and what makes Swagger UI show a file input."""
    if isinstance(tp, type) and issubclass(tp, UploadFile):
        return dict(_BINARY)
    raise NotImplementedError  # msgspec says it cannot describe the type


def _file_fields(schema: dict[str, Any]) -> dict[str, Any]:
    """A form model's optional files as files (``UploadFile | None`` gives ``anyOf`` file or null).

    A form cannot send null: a file left out is absent, which the model's
    ``required`` says; and Swagger UI shows a file input only for a plain file.
    Only a model with files is changed, and it is a form's only (msgspec decodes
    no upload from JSON).
    """
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return schema
    return {**schema, "properties": {name: _plain_file(field) for name, field in properties.items()}}


def _plain_file(schema: dict[str, Any]) -> dict[str, Any]:
    members = schema.get("anyOf")
    if not isinstance(members, list) or len(members) != 2 or {"type": "null"} not in members:
        return schema
    other = members[0] if members[1] == {"type": "null"} else members[1]
    if other != _BINARY and other.get("items") != _BINARY:
        return schema
    kept = {key: value for key, value in schema.items() if key != "anyOf" and (key, value) != ("default", None)}
    return {**other, **kept}


# An event stream's schema: each event, as an EventSource parses it (before OpenAPI 3.2's ``itemSchema``,
# ``schema`` of text/event-stream describes one event: schemathesis and OpenAPI 3.2's own guidance read it so).
def _event_schema() -> dict[str, Any]:
    fields = {"data": "string", "event": "string", "id": "string", "retry": "integer"}
    return {"type": "object", "properties": {name: {"type": kind} for name, kind in fields.items()}}


class _Operation:
    """One route's operation, its schemas to be filled in once every type is known."""

    def __init__(self, route: Route, template: PathTemplate, types: _Types) -> None:
        self.route = route
        self.template = template
        # what the route's documentation is read from: a WebSocket route's own handler, not its endpoint
        self.websocket = isinstance(route.handler, WebSocketEndpoint)
        self.handler: Any = route.handler.handler if isinstance(route.handler, WebSocketEndpoint) else route.handler
        signature: HandlerSignature | None = route.signature
        declared = {p.key: p for p in signature.parameters if p.source == "path"} if signature else {}
        # (parameter object without its schema, index of its type, default)
        self.parameters: list[tuple[dict[str, Any], int, Any]] = []
        for name, convertor in template.params:
            param = declared.get(name)
            tp = param.annotation if param is not None and param.annotation is not None else _type_of(convertor)
            self.parameters.append(({"name": name, "in": "path", "required": True}, types.add(tp), None))
        self.body: tuple[Parameter, int] | None = None
        self.form: list[tuple[Parameter, int]] = []  # a model, or each field
        for param in signature.parameters if signature else ():
            if param.source == "body":
                self.body = (param, types.add(param.annotation))
            elif param.source == "form":
                described_type = gathered_class(param.annotation) if param.fields else param.annotation
                self.form.append((param, types.add(described_type)))
            elif param.source != "path":
                for one in param.fields or (param,):
                    where = {"name": one.key, "in": param.source, "required": one.required}
                    self.parameters.append((where, types.add(one.annotation), None if one.required else one.default))
        # The success answer's body: an index into the schemas, _ANY (JSON, nothing known) or None (no body
        # known to be JSON: a Response, whose media type is the handler's, or None, which is no content).
        returns = signature.returns if signature else None
        self.returns: int | None = types.add(returns) if returns is not None else _returns(self.handler, types)
        self.validates = bool(signature and signature.parameters)
        self.operation_id = route.name or getattr(self.handler, "__name__", None) or type(self.handler).__name__
        self.tag = route.name.rpartition(".")[0] or None if route.name else None

    def build(self, schemas: tuple[dict[str, Any], ...]) -> dict[str, Any]:
        route = self.route
        operation: dict[str, Any] = {}
        summary, description = docstring(self.handler)
        if summary:
            operation["summary"] = summary
        if description:
            operation["description"] = description
        if self.parameters:
            operation["parameters"] = [
                {**where, "schema": _with_default(schemas[index], default)} for where, index, default in self.parameters
            ]
        if self.body is not None:
            param, index = self.body
            operation["requestBody"] = {"required": param.required, "content": {_JSON: {"schema": schemas[index]}}}
        if self.form:
            operation["requestBody"] = _form_body(self.form, schemas)
        status = 101 if self.websocket else route.status or 200
        success: dict[str, Any] = {"description": HTTPStatus(status).phrase}
        if self.websocket:
            success["description"] += ": the connection is a WebSocket (RFC 6455)"
        elif self.returns == _EVENTS:
            success["content"] = {"text/event-stream": {"schema": _event_schema()}}
        elif status not in _NO_CONTENT and self.returns is not None:
            schema = schemas[self.returns] if self.returns != _ANY else {}
            success["content"] = {_JSON: {"schema": schema}}
        if route.headers:
            success["headers"] = {
                name: {"schema": {"type": "string", "const": value}} for name, value in route.headers.items()
            }
        responses: dict[str, Any] = {str(status): success}
        errors = []
        if self.body is not None or self.form:
            errors += [400, 415]
        if self.template.params:
            errors.append(404)
        if self.validates:
            errors.append(422)
        for code in sorted(errors):
            responses[str(code)] = {"$ref": f"#/components/responses/{_ERRORS[code]}"}
        operation["responses"] = responses
        return operation


_ANY = -1  # a JSON body of no known schema
_EVENTS = -2  # an event stream (EventSourceResponse)
_MULTIPART = "multipart/form-data"
_URLENCODED = "application/x-www-form-urlencoded"


def _form_body(form: list[tuple[Parameter, int]], schemas: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """A form's request body: its model's schema, or an object of its fields; multipart (and
    urlencoded, when it takes no file)."""
    first, index = form[0]
    if first.fields:
        fields, schema, required = first.fields, schemas[index], first.required
    else:
        fields = tuple(param for param, _ in form)
        properties = {param.key: _plain_file(_with_default(schemas[at], param.default)) for param, at in form}
        schema = {"type": "object", "properties": properties}
        names = [param.key for param in fields if param.required]
        if names:
            schema["required"] = names
        required = bool(names)
    media_types = [_MULTIPART]
    if not any(is_upload(field.annotation) for field in fields):
        media_types.append(_URLENCODED)
    return {"required": required, "content": {media: {"schema": schema} for media in media_types}}


def _returns(handler: Any, types: _Types) -> int | None:
    """What an untyped handler's (or a handler without a model's) return annotation says of its body.

    No annotation: JSON of no known schema (a dict or a list is the usual
    answer). An EventSourceResponse: an event stream. A Response or None, alone
    or in a union: no JSON body to promise.
    Any other annotation (``dict[str, int]``): its schema, when msgspec can make
    one.
    """
    try:
        hints = typing.get_type_hints(hinted(handler), include_extras=True)
    except Exception:
        return _ANY
    if "return" not in hints:
        return _ANY
    returns = hints["return"]
    args = union_args(strip_annotated(returns)) or (returns,)
    if all(isinstance(arg, type) and issubclass(arg, EventSourceResponse) for arg in args):
        return _EVENTS
    if any(arg is type(None) or (isinstance(arg, type) and issubclass(arg, Response)) for arg in args):
        return None
    try:
        msgspec.json.schema(returns)
    except (TypeError, ValueError, NameError):
        return _ANY
    return types.add(returns)


def _type_of(convertor: Convertor) -> Any:
    """What a converter gives, when its ``convert`` says it with a class; else str."""
    returns = python_type(convertor)
    return returns if isinstance(returns, type) else str


def _with_default(schema: dict[str, Any], default: Any) -> dict[str, Any]:
    if default is None:
        return schema
    try:
        return {**schema, "default": msgspec.to_builtins(default)}
    except TypeError:  # a default JSON cannot say: the schema goes without it
        return schema


def _unique(operation_id: str, method: str, taken: set[str]) -> str:
    """A handler registered for several methods or paths gets one id each."""
    candidate = operation_id
    if candidate in taken:
        candidate = f"{operation_id}_{method.lower()}"
    number = 2
    while candidate in taken:
        candidate = f"{operation_id}_{method.lower()}_{number}"
        number += 1
    taken.add(candidate)
    return candidate


_ERROR_TYPES: tuple[Any, Any] | None = None


def _error_types() -> tuple[Any, Any]:
    """The project's error shape as msgspec types: any error, and a 422 with its problems."""
    global _ERROR_TYPES
    if _ERROR_TYPES is None:
        # made with defstruct: the annotations of classes made in a function would not resolve
        error = msgspec.defstruct("ErrorBody", [("status", int), ("message", str), ("details", Any, None)])
        problem = msgspec.defstruct("ValidationProblem", [("location", str), ("message", str)])
        validation = msgspec.defstruct(
            "ValidationErrorBody",
            [("status", Literal[422]), ("message", Literal[VALIDATION_MESSAGE]), ("details", list[problem])],  # type: ignore[valid-type]
        )
        error_response = msgspec.defstruct("ErrorResponse", [("error", error)])
        validation_response = msgspec.defstruct("ValidationErrorResponse", [("error", validation)])
        _ERROR_TYPES = (error_response, validation_response)
    return _ERROR_TYPES
