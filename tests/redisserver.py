"""A redis-server of a test's own (bench.process.RedisServer): the test may stop and start it again.

The machine's Redis (6379) is shared; a test that stops Redis stops only one it started.
A machine without redis-server skips the test (.ci/run installs it).
"""

from __future__ import annotations

import shutil

import pytest

from bench.process import RedisServer as _RedisServer
from bench.process import redis_answers as answers

__all__ = ["RedisServer", "answers"]


class RedisServer(_RedisServer):
    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed (Debian package redis-server)")
        super().__init__()
