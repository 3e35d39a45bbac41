"""The limits on a form a client sends, each with the answer given when it is reached."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["FormLimits"]

_MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FormLimits:
    """Limits on a form (``application/x-www-form-urlencoded`` or ``multipart/form-data``).

    Each count and size a client controls has one; past it the request gets 413
    (400 for a boundary longer than RFC 2046 allows), with the limit's name in the
    message. The whole body is bounded beside these by ``Limits.max_body_size``, or
    the route's own ``max_body_size``. The defaults are at least as strict as
    Starlette's (1,000 files, 1,000 fields, 1 MiB a field).

    =========================  ===========================================================
    ``max_parts``              parts of a multipart form, files and fields together
    ``max_fields``             fields that are not files (name=value pairs of an
                               urlencoded form)
    ``max_files``              file parts
    ``max_field_size``         bytes of one field's value
    ``max_file_size``          bytes of one file
    ``max_part_headers``       header lines of one part
    ``max_part_header_size``   bytes of one header line of a part
    ``max_boundary``           characters of the boundary (RFC 2046: 70)
    ``max_preamble``           bytes before the first boundary
    ``max_epilogue``           bytes after the last one
    ``max_memory``             bytes a form keeps in memory: its fields, and its files
                               until they spill to disk; fields past it: 413, files
                               past it spill
    ``max_process_memory``     bytes the forms of all the requests of a process keep in
                               memory at once; files past it spill, fields past it get
                               503 with ``Retry-After``
    ``spool_threshold``        bytes of one file kept in memory (as Starlette's 1 MiB);
                               a larger one goes to a temporary file as it arrives
    ``max_disk``               bytes the uploads of all the requests of a process hold
                               on disk at once; past it: 503 with ``Retry-After``
    =========================  ===========================================================
    """

    max_parts: int = 1000
    max_fields: int = 1000
    max_files: int = 1000
    max_field_size: int = _MiB
    max_file_size: int = 1024 * _MiB
    max_part_headers: int = 8
    max_part_header_size: int = 4096
    max_boundary: int = 70
    max_preamble: int = 1024
    max_epilogue: int = 1024
    max_memory: int = 2 * _MiB
    max_process_memory: int = 64 * _MiB
    spool_threshold: int = _MiB
    max_disk: int = 4096 * _MiB

    def __post_init__(self) -> None:
        for option in fields(self):
            value = getattr(self, option.name)
            if type(value) is not int or value < 0:
                raise ValueError(f"FormLimits.{option.name} must be an int of 0 or more, got {value!r}")
