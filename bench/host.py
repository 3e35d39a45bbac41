"""What a benchmark ran on: the host and the versions, written beside its figures.

A ratio to another server moves with the host (its CPU, its kernel, how busy
it is) and with the versions of every contender: a figure without them cannot
be compared with one from another machine or another day.
"""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from importlib import metadata

# The packages whose versions a server's speed here depends on.
PACKAGES = ("aiorest", "httptools", "uvloop", "ujson", "orjson", "aiohttp", "psycopg2-binary")
# bench/typed.py's too (a missing one is left out)
PACKAGES += ("msgspec", "fastapi", "pydantic", "pydantic-core", "litestar", "uvicorn")
PACKAGES += ("asyncpg", "aiopg")  # bench/notes.py's drivers


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo ('' where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()


def describe() -> dict[str, object]:
    """The host and the versions, as JSON-ready data."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
    }


def one_line(host: dict[str, object]) -> str:
    """``describe()`` as one Markdown line, for the head of a results table."""
    versions = host["versions"]
    assert isinstance(versions, dict)
    packages = ", ".join(f"{name} {version}" for name, version in versions.items())
    return (
        f"{host['date']}; {host['cpu']}, {host['cores']} cores, {host['kernel']}; "
        f"Python {host['python']}; {packages}; load average at the start {host['load_average']}"
    )
