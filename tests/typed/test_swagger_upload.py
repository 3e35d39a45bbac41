"""Uploading a file from Swagger UI, in a real browser: the docs page of a typed upload route works.

Headless Chromium opens the app's Swagger UI page (served by the app, no CDN),
and the test works it as a user would, through the DevTools protocol (over
aiohttp's WebSocket client; no Playwright): opens the operation, "Try it out",
picks a file from disk for the file input (``DOM.setFileInputFiles``, what a
file chooser does), types a text field, clicks "Execute". The handler records
what it received; Swagger UI shows the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import aiohttp
import msgspec
import pytest

from aiorest import App, Form, UploadFile
from aiorest.testing import TestClient

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,  # a browser: not in the fast tier
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed"),
]
# Where Swagger UI shows the status of the answer it received (the table above lists the documented ones).
ANSWER_STATUS = "document.querySelector('.live-responses-table tbody .response-col_status')"


class Received(msgspec.Struct):
    sha256: str
    size: int
    filename: str | None
    caption: str


def make_app(received: list[Received]) -> App:
    app = App()

    @app.post("/photos", max_body_size=8 * 1024 * 1024)
    async def upload_photo(photo: UploadFile, caption: Annotated[str, Form()] = "") -> Received:
        """Upload a photo."""
        digest = hashlib.sha256()
        async for chunk in photo:
            digest.update(chunk)
        received.append(Received(digest.hexdigest(), photo.size, photo.filename, caption))
        return received[-1]

    app.add_openapi_routes(title="Photos", version="1")
    return app


async def test_swagger_ui_uploads_a_file_from_a_real_browser(tmp_path: Path) -> None:
    photo = tmp_path / "holiday.jpg"
    content = os.urandom(2 * 1024 * 1024 + 123)  # past the server's 1 MiB: the route's own limit takes it
    photo.write_bytes(content)
    received: list[Received] = []
    async with TestClient(make_app(received)) as client, _browser() as page:
        await page.call("Page.navigate", url=f"{client.url}/docs")
        await page.wait_for("document.querySelector('.opblock-summary') !== null")
        await page.click(".opblock-summary-control")
        await page.wait_for("document.querySelector('.try-out__btn') !== null")
        await page.click(".try-out__btn")
        await page.wait_for("document.querySelector('input[type=file]') !== null")
        file_input = await page.element("input[type=file]")
        await page.call("DOM.setFileInputFiles", files=[str(photo)], objectId=file_input)
        await page.click("input[placeholder=caption]")
        await page.call("Input.insertText", text="at the sea")
        await page.click(".execute")
        await page.wait_for(f"{ANSWER_STATUS} !== null")
        status = await page.evaluate(f"{ANSWER_STATUS}.innerText")
        shown = await page.evaluate("document.querySelector('.live-responses-table .microlight').innerText")
    digest = hashlib.sha256(content).hexdigest()
    assert status.strip() == "200", shown
    assert received == [Received(digest, len(content), "holiday.jpg", "at the sea")]
    assert json.loads(shown) == msgspec.to_builtins(received[0])


class _Page:
    """One page of a browser, driven over the DevTools protocol."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self._socket = socket
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self._socket.send_json({"id": ident, "method": method, "params": params})
        while True:  # events come in between: skipped
            message = await asyncio.wait_for(self._socket.receive_json(), timeout=15)
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def element(self, selector: str) -> str:
        result = await self.call("Runtime.evaluate", expression=f"document.querySelector({json.dumps(selector)})")
        return result["result"]["objectId"]

    async def click(self, selector: str) -> None:
        """Click the element with the mouse, as a user would (focus moves: what was typed is taken)."""
        x, y = await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    async def wait_for(self, condition: str, timeout: float = 15) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await self.evaluate(condition):
            if loop.time() > deadline:
                html = await self.evaluate("document.body.innerHTML")
                raise AssertionError(f"timed out waiting for {condition}; the page:\n{html[:4000]}")
            await asyncio.sleep(0.1)


@asynccontextmanager
async def _browser() -> AsyncIterator[_Page]:
    """A headless Chromium with one blank page; its process group (the browser and the helpers
    it started, in a session of its own) killed by id at the end."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
        args += [f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"]
        process = await asyncio.create_subprocess_exec(
            *args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "HOME": profile},
            start_new_session=True,
        )
        try:
            port = await _devtools_port(Path(profile) / "DevToolsActivePort")
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                    targets = await response.json()
                page = next(target for target in targets if target["type"] == "page")
                async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024) as socket:
                    yield _Page(socket)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


async def _devtools_port(path: Path) -> int:
    """The port Chromium chose, once it wrote it (the first line of DevToolsActivePort)."""
    for _ in range(150):
        if path.is_file() and (lines := path.read_text().splitlines()):
            return int(lines[0])
        await asyncio.sleep(0.1)
    raise AssertionError("chromium did not start its DevTools server")
