"""``aiorest routes`` and ``aiorest openapi``: an app looked at from the command line, in a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

APP = """
from typing import Any

import msgspec

from aiorest import App, Request, WebSocket
from aiorest.security import AnyIdentity, Auth, BearerTokenIdentity, login_required


class Item(msgspec.Struct):
    name: str


async def nobody(token: str) -> Any:
    return None


app = App(title="shop", version="1.2.3", middleware=[Auth(AnyIdentity(BearerTokenIdentity(nobody)))])


@app.get("/health")
async def health(request: Request) -> dict[str, bool]:
    return {"ok": True}


@app.post("/items", name="items")
@login_required
async def add(request: Request, item: Item) -> Item:
    return item


@app.websocket("/live")
@login_required
async def live(socket: WebSocket) -> None:
    await socket.accept()
"""


def aiorest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "shop.py").write_text(APP)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "aiorest", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )


def test_routes_prints_a_line_per_route_with_its_login_and_typedness(tmp_path):
    done = aiorest(tmp_path, "routes", "shop:app")
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert lines == [
        ["METHOD", "PATH", "NAME", "HANDLER", "AUTH", "TYPED"],
        ["GET", "/health", "-", "shop.health", "-", "-"],
        ["POST", "/items", "items", "shop.add", "login", "typed"],
        ["WS", "/live", "-", "shop.live", "login", "-"],
    ]


def test_openapi_writes_the_document_to_stdout_or_a_file(tmp_path):
    done = aiorest(tmp_path, "openapi", "shop:app")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["info"] == {"title": "shop", "version": "1.2.3"}
    assert document["paths"]["/items"]["post"]["security"] == [{"bearerAuth": []}]
    assert done.stdout.startswith('{\n  "components"')  # sorted keys, indented: a stable text to diff
    written = aiorest(tmp_path, "openapi", "shop:app", "--output", "openapi.json", "--indent", "0")
    assert written.returncode == 0 and written.stdout == ""
    assert json.loads((tmp_path / "openapi.json").read_text()) == document


@pytest.mark.parametrize("command", ["routes", "openapi"])
def test_an_app_that_is_not_there_says_so(tmp_path, command):
    done = aiorest(tmp_path, command, "shop:nothing")
    assert done.returncode != 0 and "module 'shop' has no attribute 'nothing'" in done.stderr
