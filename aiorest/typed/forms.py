"""Typed forms: a handler's form fields and files, bound from ``await request.form()``.

A form is one model (``Annotated[Signup, Form()]``: a Struct, dataclass or
TypedDict, one field a form field) or fields each a parameter
(``Annotated[str, Form()]``, ``avatar: UploadFile``). Each value is converted
as a query parameter is and checked by msgspec; a file field takes an
:class:`~aiorest.UploadFile` and nothing else, a text field text and no file.
Problems are located ``form.<field>``, as a body's are ``body.<field>``.

An HTML form sends every input, filled or not: an empty text for a field
whose type is not text (``age: int | None = None``) and a file input left empty
(no file name, no bytes) count as absent, so the default applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..http.datastructures import MultiDict
from ..http.uploads import UploadFile
from .annotations import sequence_item, strip_annotated, union_args
from .fields import Model, Spec, bind_model, bind_values, model, spec

if TYPE_CHECKING:
    from ..http.forms import FormData
    from ..http.request import Request
    from .declare import Parameter

__all__ = ["FormBinding"]


class FormBinding:
    """The form parameters of a typed handler: one model, or fields and files each a parameter."""

    __slots__ = ("_model", "_specs", "_blank")

    def __init__(self, parameters: Sequence[Parameter]) -> None:
        gathered = [param for param in parameters if not param.key]
        self._model: Model | None = model(gathered[0], "form", text_as_is=False) if gathered else None
        self._specs: tuple[Spec, ...] = ()
        if not gathered:
            self._specs = tuple(spec(param, "form.", text_as_is=False) for param in parameters)
        fields = gathered[0].fields if gathered else parameters
        # The keys whose empty text means "not sent": those of fields that take no text.
        self._blank = frozenset(field.key for field in fields if not _takes_text(field.annotation))

    async def bind(self, request: Request, kwargs: dict[str, Any]) -> list[dict[str, str]] | None:
        """Read the form (415 for another body, 400 malformed, 413 past a limit) and bind it into ``kwargs``."""
        values = _filled(await request.form(), self._blank)
        if self._model is not None:
            return bind_model(values, self._model, kwargs, None)
        return bind_values(values, self._specs, kwargs, None)


def _filled(form: FormData, blank: frozenset[str]) -> MultiDict[str | UploadFile]:
    """``form`` without what a browser sends for inputs left empty."""
    items = form.multi_items()
    if not any(_empty(key, value, blank) for key, value in items):
        return form
    return MultiDict([(key, value) for key, value in items if not _empty(key, value, blank)])


def _empty(key: str, value: str | UploadFile, blank: frozenset[str]) -> bool:
    if isinstance(value, UploadFile):
        return not value.filename and value.size == 0
    return not value and key in blank


def _takes_text(tp: Any) -> bool:
    """Whether a field's type takes text as it is (``str``, a list of them, maybe Optional)."""
    tp = strip_annotated(tp)
    members = union_args(tp)
    if members is not None:
        return any(_takes_text(member) for member in members)
    item = sequence_item(tp)
    return (item if item is not None else tp) is str
