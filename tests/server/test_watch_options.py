"""What ``aiorest run --reload`` watches, and ``app.run(reload=True)`` refusing what cannot work (no process)."""

from __future__ import annotations

import pytest

from aiorest import App
from aiorest.server.process._watching import wanted
from aiorest.server.process.watch import WatchOptions


@pytest.mark.parametrize(
    "path, expected",
    [
        ("/app/notes.py", True),
        ("/app/pkg/sub/models.py", True),
        ("/app/notes.pyc", False),
        ("/app/__pycache__/notes.cpython-311.py", False),  # an excluded directory, whatever the file
        ("/app/.venv/lib/site.py", False),
        ("/app/.notes.py.swp", False),
        ("/app/notes.py~", False),
        ("/app/~notes.py", False),
        ("/app/templates/page.html", False),  # not included
        ("/app/scratch_1.py", False),  # --reload-exclude scratch_*
        ("/elsewhere/notes.py", True),  # outside the dirs: the name decides
    ],
)
def test_a_change_reloads_when_included_and_not_excluded(path, expected):
    options = WatchOptions(("/app",), excludes=(*WatchOptions(("/app",)).excludes, "scratch_*"))
    assert wanted(path, options.dirs, options.includes, options.excludes) is expected


def test_an_included_glob_with_a_folder_matches_from_the_right():
    options = WatchOptions.of(["/"], includes=["templates/*.html"])
    assert wanted("/app/templates/page.html", options.dirs, options.includes, options.excludes)
    assert not wanted("/app/static/page.html", options.dirs, options.includes, options.excludes)
    assert options.includes == ("*.py", "templates/*.html")  # the default stays


def test_a_reload_dir_that_is_not_a_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        WatchOptions.of([str(tmp_path / "missing")])


def test_app_run_with_reload_needs_to_find_the_app_again():
    # Under pytest, __main__ is pytest's (or, under xdist, has no file): this app is not one of its globals.
    expected = r"(not a global of|__main__ has no file).*: pass app_spec='module:attribute'"
    with pytest.raises(RuntimeError, match=expected):
        App().run(reload=True)
