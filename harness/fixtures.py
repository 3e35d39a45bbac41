"""The harness for pytest: fixtures that start real processes, and skip when a tool is missing.

A real nginx (deploy/nginx.conf, through harness/nginx.py) in front of real aiorest
processes; import the fixtures into a test module::

    from harness.fixtures import aiorest_process, nginx

and a ``RedisServer`` of the test's own (``harness.redis.RedisServer``) that skips the
test on a machine without redis-server (.ci/run installs it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.nginx import NGINX_BINARY, Nginx
from harness.processes import AiorestProcess
from harness.redis import RedisServer as _RedisServer
from harness.redis import redis_answers

__all__ = ["APP", "RedisServer", "aiorest_process", "nginx", "redis_answers"]

APP = "tests.apps.nginx_app:app"  # what aiorest_process() serves unless told: the tests' app behind nginx


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


class RedisServer(_RedisServer):
    """``harness.redis.RedisServer``, skipping the test where redis-server is not installed."""

    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed (Debian package redis-server)")
        super().__init__()
