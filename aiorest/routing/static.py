"""``App.static`` (and ``Router.static``): a directory served under a path prefix, and nothing outside it.

The file name comes from the raw request target, not from the decoded path the
router matched: a ``%2f`` must stay inside its segment rather than become a
separator. Each segment is decoded on its own and refused if it could climb
or jump (``..``, ``.``, an empty segment, a slash or back slash, a NUL, a drive
name such as ``C:``); the file opened at the joined path, symbolic links
followed, must still lie inside the directory (FileResponse checks it). Anything refused is a 404,
like a file that does not exist; a directory is a 404 too (no listing).
"""

from __future__ import annotations

import os
from urllib.parse import unquote

from ..http.exceptions import HTTPNotFound
from ..http.files import FileResponse
from ..http.request import Request

__all__ = ["StaticFiles", "safe_path"]


def safe_path(root: str, raw_rest: str) -> str | None:
    """The file path for ``raw_rest`` (still percent-encoded) under ``root`` (resolved), or None."""
    parts = []
    for segment in raw_rest.split("/"):
        try:
            name = unquote(segment, errors="strict")
        except UnicodeDecodeError:
            return None
        if (
            name in ("", ".", "..")
            or "/" in name
            or "\\" in name
            or "\0" in name
            or (len(name) >= 2 and name[1] == ":" and name[0].isalpha())
        ):
            return None
        parts.append(name)
    # No segment can climb or jump: the joined path is under root. Where a symbolic link
    # leads is checked on the file once opened (FileResponse, its root set).
    return os.path.join(root, *parts)


class StaticFiles:
    """The handler of a ``static`` route: the file under ``directory`` the rest of the path names."""

    def __init__(
        self, prefix: str, directory: str | os.PathLike[str], *, cache_control: str | None, precompressed: bool
    ):
        self.prefix = prefix.rstrip("/") + "/"
        self.root = os.path.realpath(directory)
        if not os.path.isdir(self.root):
            raise ValueError(f"static directory {os.fspath(directory)!r} is not a directory")
        self.cache_control = cache_control
        self.precompressed = precompressed

    async def __call__(self, request: Request) -> FileResponse:
        """A file of the directory, with validators, ranges and precompressed variants."""
        # The rest of the raw path after as many segments as the (decoded) prefix matched:
        # a router's own prefix is part of it. safe_path holds whatever that rest is.
        rest = request.path_params["path"]
        skip = request.path[: len(request.path) - len(rest)].count("/")
        path = safe_path(self.root, "/".join(request.raw_path.decode("latin-1").split("/")[skip:]))
        if path is None:
            raise HTTPNotFound()
        response = FileResponse(path, cache_control=self.cache_control, precompressed=self.precompressed)
        response._root = self.root
        return response
