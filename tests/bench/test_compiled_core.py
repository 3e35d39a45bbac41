"""bench/compiled_core.py's steps: the copy's classes made subclassable for mypyc, one module compiled by Cython."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import compiled_core

ROOT = Path(__file__).resolve().parents[2]


def test_mypyc_copies_let_python_subclass_native_classes_only(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from __future__ import annotations\n"
        "class Plain:\n    pass\n"
        "class Options(TypedDict, total=False):\n    pass\n"
        "class Missing(LookupError):\n    pass\n"
        "class Reader(Plain):\n    pass\n"
    )
    compiled_core._allow_python_subclasses(module)
    text = module.read_text()
    assert text.count("@_mypyc_attr(allow_interpreted_subclasses=True)\n") == 2
    assert "@_mypyc_attr(allow_interpreted_subclasses=True)\nclass Plain:" in text
    assert "@_mypyc_attr(allow_interpreted_subclasses=True)\nclass Reader(Plain):" in text
    assert "from mypy_extensions import mypyc_attr as _mypyc_attr\n" in text


@pytest.mark.skipif(importlib.util.find_spec("Cython") is None, reason="Cython is not installed")
def test_cython_compiles_a_module_of_the_copy_that_then_answers_as_before(tmp_path):
    shutil.copytree(ROOT / "aiorest", tmp_path / "aiorest", ignore=shutil.ignore_patterns("__pycache__"))
    compiled_core._compile(tmp_path, "cython", ["aiorest/routing/paths.py"])
    check = (
        "import aiorest.routing.paths as p\n"
        "from aiorest.routing.convertors import DEFAULT_CONVERTORS as CONVERTORS\n"
        "assert p.__file__.endswith('.so'), p.__file__\n"
        "t = p.compile_path('/notes/{note_id:int}', CONVERTORS, p.PathTemplate)\n"
        "print(t.openapi_path, t.convert(['7']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "/notes/{note_id} {'note_id': 7}"
