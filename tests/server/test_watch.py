"""``aiorest run --reload``: a change of the app's code replaces its worker, the socket staying bound."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import steady
from harness.ports import free_port
from harness.processes import ROOT, AiorestProcess, http_get
from tests.server.versioned import APP


def write_app(folder: Path, version: int, extra: str = "") -> None:
    # Written aside, then renamed: one event, where truncating and writing in place could be two
    # batches on a loaded machine (a pause of 50 ms between them), so two reloads.
    (folder / "versioned.tmp").write_text(APP.format(version=version, extra=extra))
    os.replace(folder / "versioned.tmp", folder / "versioned.py")


def reloading(folder: Path, *args: str) -> AiorestProcess:
    # No .pyc: a rewrite within the second the old one was compiled, of the same
    # size, would pass for the old source.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return AiorestProcess(
        "versioned:app", "--reload", *args, cwd=folder, env=env, ready_path="/version", log_path=folder / "aiorest.log"
    )


def version(server: AiorestProcess) -> int:
    return json.loads(server.get("/version")[1])["version"]


def wait_for_version(server: AiorestProcess, expected: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while (seen := version(server)) != expected:
        assert time.monotonic() < deadline, f"still version {seen}, not {expected}:\n{server.log()}"
        time.sleep(0.05)


def watchers_of(parent: int) -> list[int]:
    """The pids of the watching processes started by ``parent`` (their argument names it)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = f'"parent": {parent}'.encode() in b" ".join(command)
        if ours and any(part.endswith(b"_watching.py") for part in command):
            found.append(int(proc.name))
    return found


async def test_a_change_reloads_the_worker_while_requests_go_on_without_a_failure(tmp_path):
    write_app(tmp_path, 1)
    with reloading(tmp_path) as server:
        assert version(server) == 1
        assert len(watchers_of(server.pid)) == 1
        load = asyncio.ensure_future(steady.run(server.url + "/version", rate=200, duration=3, connections=4))
        await asyncio.sleep(0.5)
        write_app(tmp_path, 2)
        await asyncio.to_thread(wait_for_version, server, 2)
        result = await load
        assert result.failed == 0, result.summary()  # no refused or reset connection, no 5xx
        assert result.statuses[200] > 300, result.summary()
        log = server.log()
    assert server.returncode == 0
    assert "changed: versioned.py" in log, log
    assert re.search(r"reloaded in \d+\.\d\d s \(from the change seen to the new code serving", log), log
    assert " ERROR " not in log and " WARNING " not in log, log
    assert watchers_of(server.pid) == []  # stopped with the rest


async def test_a_syntax_error_is_logged_once_and_the_old_code_serves_until_a_fix(tmp_path):
    write_app(tmp_path, 1)
    with reloading(tmp_path) as server:
        write_app(tmp_path, 2, "def broken(:\n")
        log = await asyncio.to_thread(server.wait_for_log, "still serving the code from before the change")
        assert version(server) == 1
        write_app(tmp_path, 3)
        await asyncio.to_thread(wait_for_version, server, 3)
        log = await asyncio.to_thread(server.wait_for_log, "reloaded in")
    lines = log.splitlines()
    errors = [n for n, line in enumerate(lines) if " ERROR " in line]
    assert len(errors) == 1, log
    assert "cannot import 'versioned': SyntaxError" in lines[errors[0]], log
    # The traceback follows its line: where, and what, without the import machinery's frames.
    block = "\n".join(lines[errors[0] + 1 : errors[0] + 5])
    assert 'versioned.py", line 9' in block and "def broken(:" in block and "SyntaxError:" in block, log
    assert "importlib" not in log, log
    assert log.count("reload failed") == 1 and log.count("reloaded in") == 1, log
    [failed] = [line for line in lines if "reload failed" in line]
    assert " WARNING " in failed and "(the error above)" in failed, failed


async def test_an_app_that_cannot_start_at_first_waits_for_the_change_that_fixes_it(tmp_path):
    write_app(tmp_path, 1, "raise ImportError('not yet')")
    server = reloading(tmp_path)
    server.launch()
    try:
        log = await asyncio.to_thread(server.wait_for_log, "waiting for a change to start it again")
        assert "ImportError: not yet" in log, log
        write_app(tmp_path, 2)
        await asyncio.to_thread(server.wait_serving)
        assert version(server) == 2
        await asyncio.to_thread(server.wait_for_log, "reloaded in")
    finally:
        assert server.stop(timeout=15) == 0


async def test_a_change_during_a_reload_brings_one_more_reload(tmp_path):
    slow = "async def slow(app):\n    await asyncio.sleep(1)\napp.on_startup.append(slow)"
    write_app(tmp_path, 1, slow)
    with reloading(tmp_path) as server:
        write_app(tmp_path, 2, slow)
        await asyncio.to_thread(server.wait_for_log, "a change: replacing the worker")
        write_app(tmp_path, 3, slow)  # the new worker is in its startup for a second
        await asyncio.to_thread(wait_for_version, server, 3)
        log = await asyncio.to_thread(server.wait_for_log, "reloaded in", count=2)
    assert "a change during a reload: another reload follows it" in log, log
    assert log.count("a change: replacing the worker") == 2, log


async def test_an_excluded_file_does_not_reload(tmp_path):
    write_app(tmp_path, 1)
    with reloading(tmp_path, "--reload-exclude", "scratch_*") as server:
        (tmp_path / "scratch_notes.py").write_text("x = 1\n")
        (tmp_path / "README.txt").write_text("not *.py\n")
        await asyncio.sleep(0.3)  # apart from the next change, or one batch (which would still name the file)
        write_app(tmp_path, 2)
        await asyncio.to_thread(wait_for_version, server, 2)
        log = server.log()
    changes = [line for line in log.splitlines() if "changed:" in line]
    assert len(changes) == 1 and changes[0].endswith("changed: versioned.py"), log
    assert log.count("reloaded in") == 1, log


def test_reload_dir_and_include_watch_more_files(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "templates").mkdir()
    write_app(tmp_path / "app", 1)
    server = AiorestProcess(
        "versioned:app",
        "--reload",
        "--reload-dir",
        str(tmp_path / "templates"),
        "--reload-include",
        "*.html",
        cwd=tmp_path / "app",
        ready_path="/version",
    )
    with server:
        (tmp_path / "templates" / "page.html").write_text("<p>hi</p>")
        log = server.wait_for_log("reloaded in")
    assert f"changed: {tmp_path / 'templates' / 'page.html'}" in log, log


@pytest.mark.parametrize(
    "args, message",
    [
        (["--reload", "--workers", "2"], "--reload runs one worker"),
        (["--reload-dir", "."], "--reload-dir is an option of --reload, which is not given"),
    ],
)
def test_flags_that_do_not_go_with_reload_are_refused(tmp_path, args, message):
    write_app(tmp_path, 1)
    command = [sys.executable, "-m", "aiorest", "run", "versioned:app", *args]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and message in done.stderr, done.stderr


SCRIPT = """
import time

from aiorest import App

app = App()


@app.get("/version")
async def version(request):
    return {{"version": {version}}}


@app.get("/stuck")
async def stuck(request):
    time.sleep(0.3)  # a blocked loop: the detector is on under reload
    return {{}}


if __name__ == "__main__":
    app.run(port={port}, reload=True)
"""


def test_app_run_with_reload_imports_the_script_again_on_a_change(tmp_path):
    port = free_port()
    script = tmp_path / "serve.py"
    script.write_text(SCRIPT.format(version=1, port=port))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    with (tmp_path / "log").open("wb") as log:
        process = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, stdout=log, stderr=log)
    try:
        seen = []
        deadline = time.monotonic() + 20
        for expected in (1, 2):
            if expected == 2:
                script.write_text(SCRIPT.format(version=2, port=port))
            while not seen or seen[-1] != expected:
                assert time.monotonic() < deadline and process.poll() is None, (tmp_path / "log").read_text()
                try:
                    seen.append(json.loads(http_get(port, "/version")[1])["version"])
                except OSError:
                    time.sleep(0.05)
        while "reloaded in" not in (tmp_path / "log").read_text():  # the parent hears it a moment later
            assert time.monotonic() < deadline, (tmp_path / "log").read_text()
            time.sleep(0.05)
        assert http_get(port, "/stuck")[0] == 200
        while "event loop blocked for" not in (tmp_path / "log").read_text():  # on at 0.1 s under reload
            assert time.monotonic() < deadline, (tmp_path / "log").read_text()
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 0
    text = (tmp_path / "log").read_text()
    assert "changed: serve.py" in text, text
