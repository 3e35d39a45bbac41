"""Typed handlers per request: bind the declared inputs, call, encode the result.

:func:`aiorest.typed.read_signature` reads a handler's declarations once, when
its route is registered; a :class:`TypedEndpoint` is what the app calls instead
of the handler. It takes each input out of the request, converts and validates
it with the decoders built at registration, answers 422 listing the problems,
and encodes what the handler returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, get_origin

from ..http.datastructures import Headers
from ..http.exceptions import HTTPUnprocessableEntity
from ..http.jsonbody import bad_body
from ..http.request import Request
from ..http.response import Response, to_response
from .declare import VALIDATION_MESSAGE, HandlerSignature, Parameter
from .fields import Model, Spec, add_problem, bind_model, bind_values, model, problem, spec
from .forms import FormBinding

try:
    import msgspec
except ImportError:  # typed.read_signature refuses typed handlers without it
    msgspec = None  # type: ignore[assignment]

__all__ = ["TypedEndpoint"]

_JSON = "application/json"


class TypedEndpoint:
    """A typed handler bound to its route: binds, validates, calls, encodes.

    Every invalid input (path, query, header, cookie, form field; the body's first
    problem, which is all msgspec reports) is collected into one 422 answer. It is
    returned as a Response, which costs far less than raising, unless the app
    has an exception handler for it: then ``raise_errors`` is set at startup and
    an :class:`~aiorest.HTTPUnprocessableEntity` is raised instead.
    """

    __slots__ = (
        "signature",
        "handler",
        "raise_errors",
        "_request",
        "_path",
        "_query",
        "_gathered",
        "_headers",
        "_cookies",
        "_body",
        "_body_required",
        "_form",
        "_strict_content_type",
        "_decoder",
        "_encoder",
        "_status",
        "_empty_status",
        "_response_headers",
        "_plain_result",
    )

    def __init__(self, signature: HandlerSignature) -> None:
        self.signature = signature
        self.handler = signature.handler
        self.raise_errors = False
        self._request = signature.request
        path: list[tuple[str, str, Any]] = []
        query: list[Spec] = []
        gathered: list[Model] = []
        forms: list[Parameter] = []
        headers: list[Spec] = []
        cookies: list[Spec] = []
        self._body: str | None = None
        self._body_required = True
        self._strict_content_type = signature.strict_content_type
        self._decoder: msgspec.json.Decoder[Any] | None = None
        for param in signature.parameters:
            if param.source == "path":
                # Checked only when it says more than the converter: constraints.
                check = param.annotation if get_origin(param.annotation) is Annotated else None
                path.append((param.name, param.key, check))
            elif param.source == "body":
                self._body = param.name
                self._body_required = param.required
                self._decoder = msgspec.json.Decoder(param.annotation)
            elif param.source == "form":
                forms.append(param)
            elif param.fields:
                gathered.append(model(param, "query"))
            else:
                {"query": query, "header": headers, "cookie": cookies}[param.source].append(
                    spec(param, f"{param.source}.")
                )
        self._path = tuple(path)
        self._query = tuple(query)
        self._gathered = tuple(gathered)
        self._headers = tuple(headers)
        self._cookies = tuple(cookies)
        self._form = FormBinding(forms) if forms else None
        self._encoder = msgspec.json.Encoder() if signature.returns is not None else None
        self._status = signature.status or 200
        self._empty_status = signature.status or 204
        self._response_headers = Headers(signature.headers) if signature.headers else None
        # Nothing to do to the result: the server turns it into a response as usual.
        self._plain_result = self._encoder is None and signature.status is None and not signature.headers

    async def __call__(self, request: Request) -> Any:
        kwargs: dict[str, Any] = {}
        if self._request is not None:
            kwargs[self._request] = request
        errors: list[dict[str, str]] | None = None
        if self._body is not None:
            errors = await self._read_body(request, kwargs)
        elif self._form is not None:
            errors = await self._form.bind(request, kwargs)
        if self._path:
            errors = self._bind_path(request, kwargs, errors)
        if self._query:
            errors = bind_values(request.query, self._query, kwargs, errors)
        for gathered in self._gathered:
            errors = bind_model(request.query, gathered, kwargs, errors)
        if self._headers:
            errors = bind_values(request.headers, self._headers, kwargs, errors)
        if self._cookies:
            errors = bind_values(request.cookies, self._cookies, kwargs, errors)
        if errors is not None:
            if self.raise_errors:
                raise HTTPUnprocessableEntity(VALIDATION_MESSAGE, details=errors)
            return Response(_ERRORS_ENCODE(_error_body(errors)), 422, None, _JSON)
        result = await self.handler(**kwargs)
        if self._plain_result or isinstance(result, Response):
            return result
        if self._encoder is not None and result is not None:
            response = Response(self._encoder.encode(result), self._status, None, _JSON)
        else:
            response = to_response(result)  # a dict or a list: JSON; None: no content
            response.status = self._status if result is not None else self._empty_status
        if self._response_headers is not None:
            response.headers.extend(self._response_headers)  # a new response: no header of its own
        return response

    async def _read_body(self, request: Request, kwargs: dict[str, Any]) -> list[dict[str, str]] | None:
        body = await request.json_body(
            required=self._body_required, strict_content_type=self._strict_content_type, locate=True
        )
        if not body:
            return None  # the parameter's default
        assert self._decoder is not None and self._body is not None
        try:
            if not body.isascii():
                body.decode()  # msgspec checks only the strings it keeps: JSON is UTF-8 throughout
            kwargs[self._body] = self._decoder.decode(body)
        except msgspec.ValidationError as exc:
            return [problem("body", str(exc))]
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise bad_body(f"request body is not valid JSON: {exc}") from None
        except RecursionError:  # msgspec's depth is bounded by Python's recursion limit
            raise bad_body("request body is not valid JSON: JSON nested too deeply") from None
        return None

    def _bind_path(
        self, request: Request, kwargs: dict[str, Any], errors: list[dict[str, str]] | None
    ) -> list[dict[str, str]] | None:

        params = request.path_params
        for name, key, check in self._path:
            value = params[key]
            if check is not None:
                try:
                    value = msgspec.convert(value, check)
                except msgspec.ValidationError as exc:
                    errors = add_problem(errors, problem(f"path.{key}", str(exc)))
                    continue
            kwargs[name] = value
        return errors


def _error_body(errors: list[dict[str, str]]) -> dict[str, Any]:
    return {"error": {"status": 422, "message": VALIDATION_MESSAGE, "details": errors}}


def _encode_errors(value: Any) -> bytes:
    global _ERRORS_ENCODE
    _ERRORS_ENCODE = msgspec.json.Encoder().encode  # bound once, on the first 422
    return _ERRORS_ENCODE(value)


_ERRORS_ENCODE: Callable[[Any], bytes] = _encode_errors
