"""The app's own log as JSON lines (``--log-format json``): a real ``aiorest run``, and the formatter alone."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

from aiorest.ops import JSONLogFormatter
from harness.ports import free_port
from tests.cli.test_cli import python, running, wait_until_accepting
from tests.rawclient import fetch, get

APP = """
import logging

from aiorest import App, Request

app = App()
log = logging.getLogger("shop")


@app.get("/buy")
async def buy(request: Request) -> dict[str, bool]:
    log.warning("bought %s", "a lamp", extra={"sku": 42})
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("and then")
    return {"ok": True}
"""


async def test_json_log_lines_carry_the_request_id_the_extra_fields_and_the_traceback(tmp_path: Path):
    (tmp_path / "shop.py").write_text(APP)
    port = free_port()
    process = await python(
        "-m", "aiorest", "run", "shop:app", "--port", str(port), "--log-format", "json", cwd=tmp_path, merge=True
    )
    async with running(process):
        await wait_until_accepting(process, port)
        [response] = await fetch(port, get("/buy"), count=1)
        process.send_signal(signal.SIGTERM)
        output, _ = await process.communicate()
    lines = [json.loads(line) for line in output.decode().splitlines() if line.startswith("{")]
    assert lines and all(line.keys() >= {"time", "level", "logger", "message", "process"} for line in lines)
    bought = next(line for line in lines if line["logger"] == "shop" and line["level"] == "WARNING")
    assert bought["message"] == "bought a lamp" and bought["sku"] == 42
    assert bought["request_id"] == response.header("x-request-id")
    failed = next(line for line in lines if line["message"] == "and then")
    assert "ZeroDivisionError" in failed["exception"] and failed["request_id"] == bought["request_id"]
    serving = next(line for line in lines if line["logger"] == "aiorest.server")  # aiorest's own lines too
    assert serving["request_id"] is None  # written outside any request


def test_the_formatter_writes_one_line_even_for_a_message_of_several():
    record = logging.LogRecord("app", logging.INFO, __file__, 1, "two\nlines and %s", ("é",), None)
    line = JSONLogFormatter().format(record)
    assert "\n" not in line and json.loads(line)["message"] == "two\nlines and é"
    assert json.loads(line)["request_id"] is None
