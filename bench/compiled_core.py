"""A compiled core, tried: the hot path's modules compiled with mypyc or Cython, counted against pure Python.

    python bench/compiled_core.py                          # both compilers, /json and /plaintext
    python bench/compiled_core.py --compiler mypyc --endpoints /json

For each compiler this copies ``aiorest/`` and ``bench/`` to a temporary folder,
counts instructions per request there with ``python -m bench.instructions``
(valgrind: a figure the machine's load cannot move), compiles the hot path's
modules in place, counts again from the same folder (the count depends on the
checkout's path) and prints the change. aiorest would adopt a compiled core only
for a drop of at least ``ADOPT`` (25%) on ``/json``; the verdict is printed.

What each compiler needs, and cannot take:

- both leave out ``server/stepping.py`` and ``server/driving.py``: their
  ``types.coroutine`` generators step a handler's coroutine by hand, and a
  compiled generator is neither awaitable that way nor iterable;
- mypyc: a class the app or aiorest subclasses in Python must allow it
  (``@mypyc_attr(allow_interpreted_subclasses=True)``, added to the copy's
  classes); ``object.__new__(Request)`` (reader.py's way past ``__init__``) is
  refused for a native class, so the copy calls ``Request.__new__``;
  ``http/datastructures.py`` stops mypyc with an internal error;
- Cython: compiles them as they are.

The figures of a run are in docs/internals.rst (A compiled core, tried).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADOPT = 0.25  # the drop in /json instructions a compiled core must give to be adopted

HOT = [  # the sans-IO connection, the protocol, writing, the request and response, routing, the endpoint chain
    "aiorest/server/_h1/connection.py",
    "aiorest/server/_h1/reader.py",
    "aiorest/server/_h1/states.py",
    "aiorest/server/_h1/heads.py",
    "aiorest/server/_h1/body.py",
    "aiorest/server/protocol.py",
    "aiorest/server/writing.py",
    "aiorest/http/request.py",
    "aiorest/http/response.py",
    "aiorest/http/datastructures.py",
    "aiorest/routing/table.py",
    "aiorest/routing/route.py",
    "aiorest/routing/paths.py",
    "aiorest/app/chaining.py",
]
LEFT_OUT = {"mypyc": {"aiorest/http/datastructures.py"}, "cython": set()}
_CLASS = re.compile(r"^class (\w+)(\([^)]*\))?:", re.M)
_NOT_NATIVE = ("TypedDict", "Protocol", "Error", "Exception")
_TABLE_ROW = re.compile(r"^\| (/\S+) \| ([\d,]+) \|", re.M)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python bench/compiled_core.py", description=__doc__.splitlines()[0])
    parser.add_argument("--compiler", choices=("mypyc", "cython", "both"), default="both")
    parser.add_argument("--endpoints", default="/json,/plaintext", help="comma-separated")
    parser.add_argument("--requests", default="2000,12000", help="as bench.instructions's")
    args = parser.parse_args(argv)
    compilers = ["mypyc", "cython"] if args.compiler == "both" else [args.compiler]
    rows = []
    for compiler in compilers:
        with tempfile.TemporaryDirectory(prefix=f"aiorest-{compiler}-") as folder:
            tree = Path(folder)
            for part in ("aiorest", "bench"):
                shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", "out"))
            pure = _count(tree, args, f"{compiler}: pure Python")
            modules = [m for m in HOT if m not in LEFT_OUT[compiler]]
            _compile(tree, compiler, modules)
            compiled = _count(tree, args, f"{compiler}: {len(modules)} modules compiled")
            rows += [(compiler, endpoint, pure[endpoint], compiled[endpoint]) for endpoint in pure]
    print("| compiler | endpoint | pure Python instructions/request | compiled | change |")
    print("|---|---|---|---|---|")
    for compiler, endpoint, pure_count, compiled_count in rows:
        change = compiled_count / pure_count - 1
        print(f"| {compiler} | {endpoint} | {pure_count:,} | {compiled_count:,} | {change:+.1%} |")
    for compiler, endpoint, pure_count, compiled_count in rows:
        if endpoint == "/json":
            drop = 1 - compiled_count / pure_count
            verdict = "adopt" if drop >= ADOPT else "do not adopt"
            fewer = f"{drop:.1%} fewer" if drop >= 0 else f"{-drop:.1%} more"
            print(f"{compiler}: /json {fewer} instructions; {ADOPT:.0%} fewer needed: {verdict}")
    print(f"Python {sys.version.split()[0]}")
    return 0


def _count(tree: Path, args: argparse.Namespace, what: str) -> dict[str, int]:
    print(f"{what}: counting under valgrind…", file=sys.stderr, flush=True)
    command = [sys.executable, "-m", "bench.instructions", "--no-ceiling", "--endpoints", args.endpoints]
    done = subprocess.run([*command, "--requests", args.requests], cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench.instructions failed in {tree}:\n{done.stderr[-2000:]}")
    return {endpoint: int(figure.replace(",", "")) for endpoint, figure in _TABLE_ROW.findall(done.stdout)}


def _compile(tree: Path, compiler: str, modules: list[str]) -> None:
    print(f"{compiler}: compiling {len(modules)} modules…", file=sys.stderr, flush=True)
    if compiler == "mypyc":
        for module in modules:
            _allow_python_subclasses(tree / module)
        reader = tree / "aiorest/server/_h1/reader.py"
        reader.write_text(reader.read_text().replace("_new_object(Request)", "Request.__new__(Request)"))
        command = [sys.executable, "-m", "mypyc", *modules]
    else:
        script = (
            "import sys; from setuptools import setup; from Cython.Build import cythonize; "
            "setup(ext_modules=cythonize(sys.argv[1:], compiler_directives={'language_level': 3}, quiet=True),"
            " script_args=['build_ext', '--inplace'])"
        )
        command = [sys.executable, "-c", script, *modules]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True)  # no pyproject.toml here: setuptools'
    built = list(tree.glob("aiorest/**/*.so"))  # own metadata is not read
    if done.returncode != 0 or not built:
        raise SystemExit(f"{compiler} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")


def _allow_python_subclasses(path: Path) -> None:
    """``@mypyc_attr(allow_interpreted_subclasses=True)`` on the module's native classes."""

    def decorate(found: re.Match[str]) -> str:
        bases = found.group(2) or ""
        if any(word in bases for word in _NOT_NATIVE):
            return found.group(0)
        return "@_mypyc_attr(allow_interpreted_subclasses=True)\n" + found.group(0)

    text = _CLASS.sub(decorate, path.read_text())
    marker = "from __future__ import annotations\n"
    path.write_text(text.replace(marker, marker + "from mypy_extensions import mypyc_attr as _mypyc_attr\n", 1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
