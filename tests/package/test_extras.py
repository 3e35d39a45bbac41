"""The extras of pyproject.toml: each installs what its users run, and ``test`` everything the suite exercises."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def requirements(extra: str) -> set[str]:
    """The project names an extra installs directly, aiorest's own extras it names expanded."""
    found: set[str] = set()
    for requirement in EXTRAS[extra]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        if name == "aiorest":
            for included in re.search(r"\[([^\]]*)\]", requirement).group(1).split(","):
                found |= requirements(included.strip())
        else:
            found.add(name)
    return found


def test_the_load_extra_leaves_the_benchmarks_peers_out() -> None:
    # load/ compares aiorest with Flask on gunicorn; FastAPI, Litestar and aiohttp.web are bench/'s peers.
    peers = {"fastapi", "litestar", "uvicorn", "aiohttp", "aiopg", "scipy"}
    assert peers <= requirements("bench")
    assert requirements("load") & peers == set()
    runs = {"locust", "flask", "gunicorn", "matplotlib", "pgserver", "prometheus_client", "redis"}
    assert runs <= requirements("load")


def test_the_test_extra_includes_every_other_extra() -> None:
    everything = set().union(*(requirements(extra) for extra in EXTRAS if extra not in ("test", "dev")))
    assert everything - requirements("test") == set()
