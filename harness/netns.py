"""Hosts on one machine: network namespaces joined by a bridge, each with its own address.

For the cluster of ``python -m load cluster`` (load/cluster/) and its test. Root only; needs ``ip``
(iproute2). Every name the harness makes starts with ``PREFIX``: the bridge
(``aiorc0``), the namespaces (``aiorc-<host>``) and the root ends of their veth
pairs (``aiorc-<host>`` too), so that :func:`clean_leftovers` finds what a run that
crashed left behind, and touches nothing else::

    with Network("10.77.0") as net:          # the bridge aiorc0, 10.77.0.1/24 in the root namespace
        app = net.add_host("app1", 11)       # namespace aiorc-app1, 10.77.0.11 on its eth0
        process = net.popen("app1", ["python", "-m", "http.server", "--bind", app.address])
        net.cut("app1"); net.restore("app1")  # its link down, then up
        net.kill_all("app1")                  # every process in the namespace
    # every process in every namespace killed, namespaces, veths and bridge removed

The root namespace keeps an address on the bridge (``.1``): the harness itself
reaches every host from there (readiness probes, /metrics, the database).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

PREFIX = "aiorc"
BRIDGE = f"{PREFIX}0"
LOCK = f"/tmp/{PREFIX}-cluster.lock"
IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "ip"


class NetnsUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no ``ip``, or the kernel refuses)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([IP, *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or None if they can (tries one and removes it)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        probe = f"{PREFIX}-probe{os.getpid()}"
        made = _ip("netns", "add", probe, check=False)
    except FileNotFoundError:
        return "the ip command (iproute2) is missing"
    if made.returncode != 0:
        return f"ip netns add fails here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    bridge = _ip("link", "add", f"{PREFIX}p{os.getpid() % 10000}", "type", "bridge", check=False)
    if bridge.returncode != 0:
        return f"a bridge cannot be made here: {bridge.stderr.strip()}"
    _ip("link", "del", f"{PREFIX}p{os.getpid() % 10000}", check=False)
    return None


def namespace_pids(namespace: str) -> list[int]:
    """The pids of every process in ``namespace``."""
    result = _ip("netns", "pids", namespace, check=False)
    return [int(pid) for pid in result.stdout.split() if pid.isdigit()]


def kill_namespace(namespace: str, grace: float = 0.0) -> int:
    """Kill every process in ``namespace`` (SIGTERM first if ``grace`` > 0, then SIGKILL); how many there were."""
    pids = namespace_pids(namespace)
    if grace > 0:
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while namespace_pids(namespace) and time.monotonic() < deadline:
            time.sleep(0.05)
    for _ in range(50):
        left = namespace_pids(namespace)
        if not left:
            break
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.05)
    return len(pids)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def clean_leftovers() -> list[str]:
    """Remove what an earlier run left (its processes, namespaces, veths and bridge); what was removed."""
    removed = []
    namespaces = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    for namespace in namespaces:
        if namespace.startswith(f"{PREFIX}-"):
            kill_namespace(namespace)
            _ip("netns", "del", namespace, check=False)
            removed.append(f"namespace {namespace}")
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name == BRIDGE or name.startswith(f"{PREFIX}-"):
            _ip("link", "del", name, check=False)
            removed.append(f"link {name}")
    return removed


@dataclass(frozen=True)
class Host:
    name: str
    address: str

    @property
    def namespace(self) -> str:
        return f"{PREFIX}-{self.name}"

    @property
    def veth(self) -> str:
        return f"{PREFIX}-{self.name}"


class Network:
    """A bridge and the hosts on it (``subnet`` is the first three octets of a /24)."""

    def __init__(self, subnet: str = "10.77.0") -> None:
        self.subnet = subnet
        self.gateway = f"{subnet}.1"
        self.hosts: dict[str, Host] = {}
        self.processes: list[subprocess.Popen[bytes]] = []
        self._up = False
        self._lock: IO[str] | None = None
        self.removed: list[str] = []  # what an earlier run had left, removed by create()

    def create(self) -> Network:
        """Take the machine's cluster lock (one run at a time), remove leftovers, make the bridge."""
        self._lock = open(LOCK, "w")  # noqa: SIM115  # held until destroy()
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            self._lock = None
            raise RuntimeError(f"another cluster run holds {LOCK}: one at a time (they share the names)") from None
        self.removed = clean_leftovers()
        _ip("link", "add", BRIDGE, "type", "bridge")
        self._up = True
        _ip("addr", "add", f"{self.gateway}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        return self

    def add_host(self, name: str, last_octet: int) -> Host:
        if len(f"{PREFIX}-{name}") > 15:
            raise ValueError(f"host name {name!r} too long for an interface name")
        host = Host(name, f"{self.subnet}.{last_octet}")
        _ip("netns", "add", host.namespace)
        self.hosts[name] = host
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        _ip("link", "set", host.veth, "master", BRIDGE, "up")
        inside = ("-n", host.namespace)
        _ip(*inside, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip(*inside, "link", "set", "eth0", "up")
        _ip(*inside, "link", "set", "lo", "up")
        return host

    def command(self, name: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside host ``name``'s namespace."""
        return [IP, "netns", "exec", self.hosts[name].namespace, *argv]

    def popen(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        stdout: IO[Any] | int | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in host ``name`` (its own session; output to ``log`` if given)."""
        output: Any = stdout if stdout is not None else subprocess.DEVNULL
        handle = None
        if log is not None:
            handle = log.open("ab")
            output = handle
        try:
            process = subprocess.Popen(
                self.command(name, argv),
                stdout=output,
                stderr=subprocess.STDOUT,
                env=None if env is None else dict(env),
                cwd=cwd,
                start_new_session=True,
            )
        finally:
            if handle is not None:
                handle.close()
        self.processes.append(process)
        return process

    def cut(self, name: str) -> None:
        """Take host ``name``'s link down: its packets go nowhere, its connections hang."""
        _ip("link", "set", self.hosts[name].veth, "down")

    def restore(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].veth, "up")

    def kill_all(self, name: str, grace: float = 0.0) -> int:
        """Kill every process in host ``name``; how many there were."""
        count = kill_namespace(self.hosts[name].namespace, grace)
        for process in self.processes:
            if process.poll() is None:
                try:
                    process.wait(0.01)
                except subprocess.TimeoutExpired:
                    pass
        return count

    def destroy(self) -> None:
        """Every process in every host killed (SIGTERM, 2 s, SIGKILL), then the namespaces, veths and bridge."""
        for host in self.hosts.values():
            for pid in namespace_pids(host.namespace):
                _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and any(namespace_pids(h.namespace) for h in self.hosts.values()):
            time.sleep(0.05)
        for host in self.hosts.values():
            kill_namespace(host.namespace)
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        for host in self.hosts.values():
            _ip("link", "del", host.veth, check=False)
            _ip("netns", "del", host.namespace, check=False)
        self.hosts.clear()
        if self._up:
            _ip("link", "del", BRIDGE, check=False)
            self._up = False
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.destroy()
