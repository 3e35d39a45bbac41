"""Binding named values: a query parameter, a header, a cookie, a form's field, each converted and checked.

What :class:`~aiorest.typed.TypedEndpoint` and the form binding share: a
:data:`Spec` a value, made once from its :class:`~aiorest.typed.Parameter`; per
request, :func:`bind_values` takes each out of a multi-valued source into the
handler's arguments and adds a problem (``{"location", "message"}``) for each
that is missing or invalid.
"""

from __future__ import annotations

from typing import Any

from .annotations import gathered_class, sequence_item
from .declare import Parameter

try:
    import msgspec
except ImportError:  # typed.read_signature refuses typed handlers without it
    msgspec = None  # type: ignore[assignment]

__all__ = ["Spec", "Model", "spec", "model", "bind_values", "bind_model", "add_problem", "problem"]

# One value to bind: (argument name, key, type to convert to or None to pass the
# text as it is, many values (repeated keys), required, location).
Spec = tuple[str, str, Any, bool, bool, str]
# Values gathered into a Struct, dataclass or TypedDict: (argument name, its class, a spec a
# field, required, location).
Model = tuple[str, Any, tuple[Spec, ...], bool, str]


def spec(param: Parameter, prefix: str, text_as_is: bool = True) -> Spec:
    """``param``'s spec, its location ``prefix`` + its key. ``text_as_is``: a ``str`` is passed
    unchecked (a query's values are all text; a form's may be files, so it checks them)."""
    many = sequence_item(param.annotation) is not None
    tp = param.annotation
    if text_as_is and (tp is str or (many and tp in (list[str],))):
        tp = None  # the text itself: nothing to convert or check
    return (param.name, param.key, tp, many, param.required, f"{prefix}{param.key}")


def model(param: Parameter, source: str, text_as_is: bool = True) -> Model:
    """The :data:`Model` of ``param``, which gathers ``source``'s values (``query``, ``form``) into its class."""
    cls = gathered_class(param.annotation)
    specs = tuple(spec(field, f"{source}.", text_as_is) for field in param.fields)
    return (param.name, cls, specs, param.required, source)


def bind_model(
    source: Any, gathered: Model, out: dict[str, Any], errors: list[dict[str, str]] | None
) -> list[dict[str, str]] | None:
    """Take ``gathered``'s values out of ``source`` and make its object into ``out``."""
    name, cls, specs, required, location = gathered
    if not required and not any(key in source for _, key, *_ in specs):
        return errors  # nothing of it was sent: the default applies
    values: dict[str, Any] = {}
    found = bind_values(source, specs, values, None)
    if found is not None:
        return found if errors is None else errors + found
    if values or required:
        try:
            out[name] = cls(**values)
        except (TypeError, ValueError) as exc:  # its __post_init__ refused: as msgspec treats a body
            errors = add_problem(errors, {"location": location, "message": str(exc)})
    return errors


def bind_values(
    source: Any, specs: tuple[Spec, ...], out: dict[str, Any], errors: list[dict[str, str]] | None
) -> list[dict[str, str]] | None:
    """Take each spec's value out of ``source`` (a MultiDict, Headers or dict) into ``out``."""
    for name, key, tp, many, required, location in specs:
        if many:
            value: Any = source.getall(key)
            if not value:
                value = None
        else:
            value = source.get(key)
        if value is None:
            if required:
                errors = add_problem(errors, {"location": location, "message": "required"})
            continue  # the default applies
        if tp is not None:
            try:
                value = msgspec.convert(value, tp, strict=False)
            except msgspec.ValidationError as exc:
                errors = add_problem(errors, problem(location, str(exc)))
                continue
        out[name] = value
    return errors


def add_problem(errors: list[dict[str, str]] | None, problem: dict[str, str]) -> list[dict[str, str]]:
    if errors is None:
        return [problem]
    errors.append(problem)
    return errors


def problem(location: str, message: str) -> dict[str, str]:
    """A msgspec error as a problem: its ``- at `$.a[0].b``` suffix goes into the location."""
    message, at, path = message.partition(" - at `$")
    if at:
        location += path[:-1]  # ".a[0].b" or "[0]", without the closing backquote
    if message.startswith("Object missing required field `"):
        location += "." + message[31:-1]
    return {"location": location, "message": message}
