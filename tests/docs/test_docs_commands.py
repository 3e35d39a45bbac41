"""Each shell command of README.md, deploy/README.md, the quickstart and the deployment pages works as written.

The commands are read from the pages (tests/docs/docs_commands.py), so a page edited
is a test changed. What can be run here cheaply is run: ``aiorest run`` and
``python -m example_app`` serve until SIGTERM, the quickstart's ``curl`` prints
its sample output, the dedicated nginx recipe serves through a real nginx. The rest is checked (the
extras an install names exist) or named in ``ELSEWHERE`` with where it is run,
or why it is not; a command that fits no rule fails the first test.

Only the host's paths and ports change, to private ones (``localize``):
``/run/aiorest``, ``/srv/aiorest-nginx``, ``/etc/nginx/conf.d`` and
``/var/log/nginx`` move into a temporary folder, port 8080 or 80 to a free port
(``--port N`` added to an ``aiorest run`` that names no address, which would
take 8080).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.nginx import NGINX_BINARY
from harness.ports import free_port
from harness.processes import http_get, stop_process
from tests.docs.docs_commands import ROOT, Command, before, commands, every_command

#: Commands not run by this module, by a pattern of the command: where they are run, or why not.
ELSEWHERE = {
    r"python -m pytest -q": "the suite itself",
    r'python -m pytest -q -n 2 --dist loadfile -m "not serial"': "the suite itself, .ci/run runs it",
    r"python -m pytest -q -m serial": "the suite's serial modules, .ci/run runs them",
    r"sphinx-build -W --keep-going -n -b html docs docs/_build/html": "tests/docs/test_docs.py builds the docs so",
    r"nginx -t": "the system's nginx: test_distribution_nginx_file_passes_nginx_t runs it on the file written",
    r"systemctl reload nginx": "the system's nginx",
    r"DATABASE_URL=postgresql://app@10\.0\.0\.5.* aiorest run example_app\.app:app .*": (
        "other hosts' PostgreSQL and Redis (10.0.0.5, 10.0.0.6), never a target from here"
    ),
}
MYAPP = """from aiorest import App

app = App()


@app.get("/")
async def index(request):
    return {"ok": True}
"""


#: Header lines of a sample output whose values differ from run to run.
VARYING = re.compile(r"^(Date|X-Request-ID): .*")


def how(part: str) -> str:
    """What this module does with one command (one part of an ``&&`` chain)."""
    for pattern, reason in ELSEWHERE.items():
        if re.fullmatch(pattern, part.strip()):
            return f"elsewhere: {reason}"
    program = Command("", part, 0).program
    if program == "pip" or re.fullmatch(r"[A-Z_]+=\S+", part.strip()):
        return "checked" if program == "pip" else "run with its block"
    words = shlex.split(part, comments=True)
    if words[:2] == ["aiorest", "run"] or words[:4] == ["python", "-m", "aiorest", "run"]:
        return "served"
    if words[:3] == ["python", "-m", "example_app"] and words[3:] in ([], ["--reload"]):  # its PostgreSQL included
        return "served"
    if program in ("mkdir", "cp", "sed", "nginx", "curl"):
        return "run with its block"
    return "unknown"


def test_every_command_is_run_or_accounted_for() -> None:
    found = every_command()
    assert len(found) >= 20 and {command.page for command in found} >= {"README.md", "deploy/README.md"}
    unknown = [str(c) for c in found for part in c.line.split(" && ") if how(part) == "unknown"]
    assert unknown == [], "a command no test runs: run it in tests/docs/test_docs_commands.py, or say why in ELSEWHERE"


def test_ci_runs_the_readme_test_command() -> None:
    [command] = [c for c in commands("README.md") if "pytest" in c.line and "not db" not in c.line]
    ci = (ROOT / ".ci" / "run").read_text()
    # .ci/run says python3, as a fresh Debian has no `python`; the rest is the README's, verbatim.
    verbatim = command.line.replace("pip install", "python3 -m pip install", 1).replace("python -m ", "python3 -m ")
    assert verbatim in ci.splitlines(), command.line


def test_every_pip_install_names_extras_that_exist() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    installs = [part for c in every_command() for part in c.line.split(" && ") if part.startswith("pip install")]
    assert installs
    for part in installs:
        for named in re.findall(r"\.\[([^\]]*)\]", part):
            assert set(named.split(",")) <= extras, part


# -- running them -------------------------------------------------------------------------------


@pytest.fixture
def private() -> Iterator[Path]:
    """The host's folders, privately; reachable by nginx's workers, which run as nobody when we are root."""
    folder = Path(tempfile.mkdtemp(prefix="aiorest-docs-"))
    folder.chmod(0o755)
    for distribution in ("etc/nginx/conf.d", "var/log/nginx"):  # what Debian's nginx package makes
        (folder / distribution).mkdir(parents=True)
    (folder / "myapp.py").write_text(MYAPP)
    shutil.copy(ROOT / "docs" / "examples" / "hello.py", folder / "hello.py")
    for name in ("deploy/nginx.conf", "deploy/nginx/aiorest.conf"):  # commands run from the checkout's root name them
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, folder / name)
    yield folder
    for pid_file in folder.rglob("nginx.pid"):  # an nginx a recipe started, as a daemon: `nginx -s quit`
        if pid_file.read_text().strip().isdigit():  # (`nginx -t` leaves it empty)
            stop_daemon(int(pid_file.read_text()))
    shutil.rmtree(folder, ignore_errors=True)


def stop_daemon(pid: int, timeout: float = 10) -> None:
    """SIGQUIT a daemon (not our child: it forked away), SIGKILL it if it is still there after ``timeout`` s."""
    sig, deadline = signal.SIGQUIT, time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        time.sleep(0.1)
        sig = signal.SIGKILL if time.monotonic() > deadline else 0


def localize(line: str, private: Path, port: int) -> str:
    for path in ("/run/aiorest", "/srv/aiorest-nginx", "/etc/nginx/conf.d", "/var/log/nginx"):
        line = line.replace(path, f"{private}{path}")
    line = line.replace("{{LISTEN}}|80|", f"{{{{LISTEN}}}}|127.0.0.1:{port}|")
    line = line.replace("--port 8080", f"--port {port}").replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    if how(line) == "served" and not re.search(r"--(port|unix|fd)\b", line):
        line = shlex.join([*shlex.split(line, comments=True), "--port", str(port)])
    return line


def shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{os.environ['PATH']}:/usr/sbin"}
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def run_before(command: Command, private: Path, port: int) -> None:
    """Run what comes before ``command`` in its block, as a reader would have."""
    for earlier in before(command):
        if any(how(part).startswith("elsewhere") or how(part) == "served" for part in earlier.line.split(" && ")):
            continue
        if re.fullmatch(r"[A-Z_]+=\S+", earlier.line):
            continue  # the assignments are prefixed to every line below
        assignments = "; ".join(a.line for a in before(command) if re.fullmatch(r"[A-Z_]+=\S+", a.line))
        line = localize(f"{assignments}; {earlier.line}" if assignments else earlier.line, private, port)
        result = shell(line, private)
        assert result.returncode == 0, f"{earlier}\n{line}\n{result.stdout}{result.stderr}"


class Serving:
    """A served command, started through bash as written, stopped with SIGTERM (the docs' way)."""

    def __init__(self, line: str, cwd: Path) -> None:
        self.log = cwd / f"serving-{time.monotonic_ns()}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log.open("wb") as output:
            self.process = subprocess.Popen(
                ["bash", "-c", f"exec {line}"], cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT
            )

    def wait_until_serving(self, port: int | None, unix: str | None, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if http_get(port, "/", unix=unix)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"not serving within {timeout} s:\n{self.log.read_text()}")

    def stop(self) -> int:
        return stop_process(self.process, 45, signal.SIGTERM)


def served() -> list[tuple[Command, str]]:
    """Each command that serves, with the part of its ``&&`` chain that does."""
    return [(c, part) for c in every_command() for part in c.line.split(" && ") if how(part) == "served"]


@pytest.mark.parametrize(("command", "part"), served(), ids=[f"{c.page}:{part[:60]}" for c, part in served()])
def test_each_served_command_serves_until_sigterm(command: Command, part: str, private: Path) -> None:
    port = free_port()
    run_before(command, private, port)
    line = localize(part, private, port)
    unix = re.search(r"--unix (\S+)", line)
    server = Serving(line, private)
    try:
        server.wait_until_serving(None if unix else port, unix.group(1) if unix else None)
    finally:
        status = server.stop()
    assert status == 0, server.log.read_text()


def test_quickstart_curl_prints_its_sample_output(private: Path) -> None:
    [serve] = [c for c in commands("docs/quickstart.rst") if c.line.startswith("aiorest run hello:app")]
    curls = [c for c in commands("docs/quickstart.rst") if c.program == "curl"]
    assert len(curls) == 2 and all(c.output for c in curls)
    port = free_port()
    server = Serving(localize(serve.line, private, port), private)
    try:
        server.wait_until_serving(port, None)
        for curl in curls:
            printed = shell(localize(curl.line, private, port), private).stdout.replace("\r\n", "\n").splitlines()
            sample = "\n".join(curl.output).strip().splitlines()
            if "-i" in curl.words:  # the values of Date and X-Request-ID change, the lines do not
                printed, sample = ([VARYING.sub(r"\1:", ln) for ln in lines] for lines in (printed, sample))
            assert printed == sample, curl
    finally:
        server.stop()


@pytest.fixture
def nginx_binary() -> str:
    if not os.access(NGINX_BINARY, os.X_OK):
        pytest.skip(f"{NGINX_BINARY} is missing (.ci/run installs the Debian package nginx)")
    return NGINX_BINARY


def test_dedicated_nginx_recipe_serves(private: Path, nginx_binary: str) -> None:
    [run] = [c for c in commands("deploy/README.md") if how(c.line) == "served" and "$PREFIX" in before(c)[-1].line]
    port = free_port()
    run_before(run, private, port)  # makes $PREFIX, writes its configuration, starts nginx (as a daemon)
    line = localize(run.line, private, port)
    server = Serving(line, private)
    try:
        server.wait_until_serving(None, re.search(r"--unix (\S+)", line).group(1))
        status, body = http_get(port, "/")
        assert (status, body) == (200, b'{"ok":true}')
    finally:
        server.stop()


def test_distribution_nginx_file_passes_nginx_t(private: Path, nginx_binary: str) -> None:
    [sed] = [c for c in commands("deploy/README.md") if c.program == "sed" and "/etc/nginx/conf.d" in c.line]
    port = free_port()
    run_before(sed, private, port)
    result = shell(localize(sed.line, private, port), private)
    assert result.returncode == 0, result.stderr
    # Debian's nginx.conf, in short: its http block includes conf.d/*.conf.
    (private / "nginx.conf").write_text(
        f"pid {private}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
        f"http {{\n    include {private}/etc/nginx/conf.d/*.conf;\n}}\n"
    )
    checked = subprocess.run(
        [nginx_binary, "-t", "-p", f"{private}/", "-c", "nginx.conf"], capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stderr


if __name__ == "__main__":  # print what the pages hold, and what is done with each
    for found in every_command():
        for part in found.line.split(" && "):
            print(f"{how(part):60.60}  {found.page}: {part}", file=sys.stdout)
