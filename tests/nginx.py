"""pytest fixtures for a real nginx (deploy/nginx.conf, through load/nginx.py) in front of real aiorest processes.

Import them into a test module: ``from tests.nginx import aiorest_process, nginx``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from load.nginx import NGINX_BINARY, Nginx
from load.procs import AiorestProcess

APP = "tests.apps.nginx_app:app"


@pytest.fixture
def nginx() -> Iterator[Nginx]:
    """An nginx not started yet (``nginx.start(upstreams)``), stopped and removed after the test."""
    if not os.access(NGINX_BINARY, os.X_OK):
        pytest.skip(f"{NGINX_BINARY} is missing (.ci/run installs the Debian package nginx)")
    with Nginx() as server:
        yield server


@pytest.fixture
def aiorest_process(tmp_path: Path) -> Iterator[Callable[..., AiorestProcess]]:
    """Start ``aiorest run`` processes (``aiorest_process(unix=path)``...); every one is stopped after the test."""
    started: list[AiorestProcess] = []

    def start(app: str = APP, *args: str, **options: Any) -> AiorestProcess:
        process = AiorestProcess(app, *args, log_path=tmp_path / f"aiorest-{len(started)}.log", **options)
        started.append(process)
        return process.start()

    try:
        yield start
    finally:
        for process in started:
            process.stop()
