"""A real nginx in front of real aiorest processes, on loopback, for tests and load scenarios.

``Nginx`` runs the shipped configuration itself — ``deploy/nginx.conf`` verbatim,
``deploy/nginx/aiorest.conf`` with its placeholders filled in — in a private
prefix folder (pid, logs, temporary files; nothing outside it is touched), as
a foreground process listening on 127.0.0.1 only::

    with Nginx() as nginx:
        port = nginx.start(["127.0.0.1:8001", "unix:/tmp/x/aiorest.sock"])
        ...                      # http://127.0.0.1:{port}/...
    # stopped (SIGQUIT, then SIGKILL of the master and its workers), prefix removed

The aiorest processes behind it are ``harness.processes.AiorestProcess``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from harness.ports import free_port
from harness.processes import descendants, stop_process

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
NGINX_BINARY = "/usr/sbin/nginx"


def probe(address: str | tuple[str, int], path: str = "/", timeout: float = 1.0) -> int | None:
    """The status of ``GET path`` at ``address`` (a unix socket path or ``(host, port)``); None if it fails."""
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(address)
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
            line = sock.makefile("rb").readline(1024).split()
    except OSError:
        return None
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else None


def _wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], timeout: float, what: str, log: Path
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not serve within {timeout} s:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes], sig: int, timeout: float) -> None:
    """Send ``sig``; after ``timeout`` s SIGKILL the process and whatever it started."""
    if process.poll() is None:
        children = descendants(process.pid)
        stop_process(process, timeout, sig)
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


def render(template: str, values: Mapping[str, str]) -> str:
    """``template`` with each ``{{PLACEHOLDER}}`` outside comments replaced; every one must be there."""
    lines = template.splitlines(keepends=True)
    for placeholder, value in values.items():
        found = False
        for number, line in enumerate(lines):
            if placeholder in line and not line.lstrip().startswith("#"):
                lines[number] = line.replace(placeholder, value)
                found = True
        if not found:
            raise RuntimeError(f"the nginx configuration has no {placeholder}")
    return "".join(lines)


class Nginx:
    """A foreground nginx running ``deploy/nginx.conf`` in a private prefix, on 127.0.0.1 (or ``host``).

    The prefix (``.prefix``) is world-traversable, because nginx's workers run
    as ``nobody`` when the tests run as root: put unix sockets for the
    upstreams in :meth:`socket_path`. ``wrap`` goes before nginx's command
    (``ip netns exec NS``: the load balancer of load/cluster/).
    """

    def __init__(self, binary: str = NGINX_BINARY, *, host: str = "127.0.0.1", wrap: Sequence[str] = ()) -> None:
        self.binary = binary
        self.host = host
        self.wrap = list(wrap)
        self.prefix = Path(tempfile.mkdtemp(prefix="aiorest-nginx-"))
        self.prefix.chmod(0o755)
        for folder in ("conf/nginx", "logs", "temp", "run"):
            (self.prefix / folder).mkdir(parents=True)
            (self.prefix / folder).chmod(0o755)
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    def socket_path(self, name: str) -> str:
        """A path for a unix socket that nginx's workers can reach."""
        return str(self.prefix / "run" / name)

    def configure(self, upstreams: Sequence[str], port: int) -> None:
        """Write the shipped configuration into the prefix, for these upstream servers and this port.

        An upstream is what follows ``server`` in the upstream block:
        ``"127.0.0.1:8001"``, ``"unix:/path/aiorest.sock"``, ``"127.0.0.1:8002 backup"``.
        """
        if not upstreams:
            raise ValueError("nginx needs at least one upstream server")
        shutil.copyfile(DEPLOY / "nginx.conf", self.prefix / "conf/nginx.conf")
        values = {
            "{{LISTEN}}": f"{self.host}:{port}",
            "{{UPSTREAM_SERVERS}}": "\n    ".join(f"server {upstream};" for upstream in upstreams),
            "{{LOG_DIR}}": str(self.prefix / "logs"),
        }
        site = render((DEPLOY / "nginx/aiorest.conf").read_text(), values)
        (self.prefix / "conf/nginx/aiorest.conf").write_text(site)

    def start(self, upstreams: Sequence[str], listen_port: int | None = None, timeout: float = 10.0) -> int:
        """Start nginx in front of ``upstreams`` and wait until it answers; return its port."""
        if self.process is not None:
            raise RuntimeError("this nginx is already started")
        self.port = port = listen_port or free_port()
        self.configure(upstreams, port)
        stderr = self.prefix / "logs/stderr.log"
        with stderr.open("wb") as output:
            self.process = subprocess.Popen(
                [*self._command(), "-g", "daemon off;"], stdout=output, stderr=subprocess.STDOUT
            )
        # /metrics is answered by nginx itself (404): a worker is serving.
        _wait_until(lambda: probe((self.host, port), "/metrics") == 404, self.process, timeout, "nginx", stderr)
        return port

    def stop(self, timeout: float = 10.0) -> None:
        """Quit gracefully (SIGQUIT); kill nginx and its workers if it takes longer than ``timeout`` s."""
        if self.process is not None:
            _stop(self.process, signal.SIGQUIT, timeout)

    def close(self) -> None:
        """Stop nginx and remove the prefix."""
        self.stop()
        shutil.rmtree(self.prefix, ignore_errors=True)

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("nginx is not started")
        return f"http://{self.host}:{self.port}"

    def worker_pids(self) -> list[int]:
        """The pids of nginx's worker processes."""
        return descendants(self.process.pid) if self.process is not None and self.process.poll() is None else []

    def error_log(self) -> str:
        """What nginx wrote to stderr and to its error log."""
        return "".join(
            path.read_text(errors="replace")
            for path in (self.prefix / "logs/stderr.log", self.prefix / "logs/error.log")
            if path.exists()
        )

    def access_log(self) -> list[str]:
        """The access log's lines (the ``aiorest`` format of deploy/nginx/aiorest.conf)."""
        path = self.prefix / "logs/aiorest.access.log"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def _command(self) -> list[str]:
        return [*self.wrap, self.binary, "-p", f"{self.prefix}/", "-c", "conf/nginx.conf", "-e", "stderr"]

    def __enter__(self) -> Nginx:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
