"""The cluster's hosts and what runs on them, for ``python -m load cluster`` and tests/load/test_cluster.py.

A :class:`Cluster` is a :class:`harness.netns.Network` with, each host a namespace:

======== =========== ==========================================================
host     address     runs
======== =========== ==========================================================
lb       .10         nginx with deploy/nginx.conf, upstreams = the app hosts
app1..N  .11 ...     ``aiorest run example_app.app:app --workers W --metrics``
db       .20         its own PostgreSQL (:5432) and PgBouncer (:6432, transaction mode)
redis    .21         its own redis-server (:6379)
load1..2 .30, .31    the load generators (started by load/cluster/run.py)
======== =========== ==========================================================

The app hosts reach PostgreSQL through PgBouncer, a pool of ``pool_per_host`` connections
shared by a host's workers (``DATABASE_POOL_TOTAL``), but for each worker's LISTEN (the live
feed's), which needs a session: PostgreSQL itself (``DATABASE_LISTEN_URL``). PgBouncer holds
``pgbouncer_pool`` server connections, PostgreSQL allows ``pg_max_connections``:
:meth:`ClusterConfig.budget` checks that they fit. With ``rate_limit_store`` set, the app hosts
get it as ``RATE_LIMIT_STORE`` (``redis://<redis host>:6379/0``, or ``postgres``: the app's own
database): the shared login limiter, where the example app supports it.

Everything is stopped and removed by :meth:`Cluster.close` (also on errors: use
``with``), the PostgreSQL data folder with it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg2

from example_app.app import MIGRATE_ARGS
from harness.netns import Network
from harness.nginx import Nginx, probe
from harness.pgbouncer import PGBOUNCER
from harness.processes import AiorestProcess, stop_process

ROOT = Path(__file__).resolve().parents[2]
APP = "example_app.app:app"
APP_PORT = 8080
PG_PORT = 5432
PGBOUNCER_PORT = 6432
REDIS_PORT = 6379
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
DATABASE = "aiorest"


def postgres_bin() -> Path | None:
    """The newest Debian PostgreSQL server binaries (``/usr/lib/postgresql/N/bin``), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def missing_tools() -> list[str]:
    """What the cluster needs and this machine lacks (Debian package names)."""
    missing = []
    if postgres_bin() is None:
        missing.append("postgresql")
    tools = [(PGBOUNCER, "pgbouncer"), (REDIS_SERVER, "redis-server"), ("/usr/sbin/nginx", "nginx")]
    tools.append((shutil.which("curl") or "/usr/bin/curl", "curl"))
    for path, package in tools:
        if not os.access(path, os.X_OK):
            missing.append(package)
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        missing.append("postgresql (its postgres user)")
    return missing


@dataclass
class ClusterConfig:
    app_hosts: int = 3
    workers: int = 2
    subnet: str = "10.77.0"
    pool_per_host: int = 16  # DATABASE_POOL_TOTAL: the host's connections to PgBouncer, shared by its workers
    pool_min: int = 2  # DATABASE_POOL_MIN per worker
    pgbouncer_pool: int = 20  # server connections PgBouncer opens to PostgreSQL
    pg_max_connections: int = 40
    rate_limit_store: str | None = None  # None, "redis" or "postgres"
    session_store: str = "postgres"  # SESSION_STORE of the app hosts: "postgres" or "redis"
    app_log_level: str = "info"

    def budget(self) -> dict[str, int]:
        """The connection budget: raises ValueError if the hosts' pools or PgBouncer's do not fit."""
        clients, listens = self.app_hosts * self.pool_per_host, self.app_hosts * self.workers
        if self.pool_per_host < self.workers * self.pool_min:
            raise ValueError(f"pool_per_host {self.pool_per_host} < workers x pool_min")
        if self.pgbouncer_pool + listens + 5 > self.pg_max_connections:  # 5: the harness's own, PgBouncer's admin
            raise ValueError("PgBouncer's server pool and the LISTEN connections do not fit max_connections")
        return {
            "client_connections": clients,
            "pgbouncer_max_client_conn": clients * 2 + 50,
            "server_connections": self.pgbouncer_pool,
            "pg_max_connections": self.pg_max_connections,
        }


class Cluster:
    """The hosts of the module's table, built and started by :meth:`start`, torn down by :meth:`close`."""

    def __init__(self, config: ClusterConfig, logs: Path | None = None, progress: Any = None) -> None:
        config.budget()
        self.config = config
        self.net = Network(config.subnet)
        self.base = Path(tempfile.mkdtemp(prefix="aiorest-cluster-"))
        self.base.chmod(0o755)
        self.logs = logs or self.base / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.say = progress or (lambda text: None)
        self.apps: dict[str, AiorestProcess] = {}
        self.nginx: Nginx | None = None
        self.postgres: subprocess.Popen[bytes] | None = None
        self.pgbouncer: subprocess.Popen[bytes] | None = None
        self.redis: subprocess.Popen[bytes] | None = None
        self.app_names = [f"app{n + 1}" for n in range(config.app_hosts)]
        self.load_names = ["load1", "load2"]

    # addresses
    def address(self, host: str) -> str:
        return self.net.hosts[host].address

    @property
    def url(self) -> str:
        """The balancer: where the traffic goes."""
        return f"http://{self.address('lb')}"

    @property
    def direct_dsn(self) -> str:
        """PostgreSQL itself, bypassing PgBouncer (for the harness's checks)."""
        return f"postgresql://postgres@{self.address('db')}:{PG_PORT}/{DATABASE}?sslmode=disable&connect_timeout=5"

    @property
    def pooled_dsn(self) -> str:
        return (
            f"postgresql://postgres@{self.address('db')}:{PGBOUNCER_PORT}/{DATABASE}?sslmode=disable&connect_timeout=5"
        )

    @property
    def redis_url(self) -> str:
        return f"redis://{self.address('redis')}:{REDIS_PORT}/0"

    # the whole
    def start(self) -> Cluster:
        self.net.create()
        if self.net.removed:
            self.say(f"removed what an earlier run left: {', '.join(self.net.removed)}")
        self.net.add_host("lb", 10)
        for number, name in enumerate(self.app_names):
            self.net.add_host(name, 11 + number)
        self.net.add_host("db", 20)
        self.net.add_host("redis", 21)
        for number, name in enumerate(self.load_names):
            self.net.add_host(name, 30 + number)
        self.say(f"network: bridge and {len(self.net.hosts)} hosts on {self.config.subnet}.0/24")
        self.start_postgres()
        self.start_pgbouncer()
        self.start_redis()
        self.say("db host: PostgreSQL and PgBouncer (transaction mode); redis host: redis-server")
        self.start_apps()
        self.nginx = Nginx(host=self.address("lb"), wrap=self.net.command("lb", []))
        self.nginx.start([f"{self.address(name)}:{APP_PORT}" for name in self.app_names], listen_port=80)
        self.say(f"lb host: nginx in front of {len(self.app_names)} app hosts at {self.url}")
        return self

    def close(self) -> None:
        """Stop everything (gracefully for a few seconds, then by SIGKILL) and remove the hosts and files."""
        if self.nginx is not None:
            self.nginx.stop(timeout=5)
        for app in self.apps.values():
            if app.returncode is None:
                try:
                    app.stop(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        self.net.destroy()
        if self.nginx is not None:
            self._keep_nginx_logs(self.nginx)
            self.nginx.close()
        shutil.rmtree(self.base, ignore_errors=True)  # the data, the configurations; the logs if they were here

    def _keep_nginx_logs(self, nginx: Nginx) -> None:
        """nginx's error log, and the access log's lines of requests it passed to a second upstream."""
        (self.logs / "nginx-error.log").write_text(nginx.error_log())
        retried = [line for line in nginx.access_log() if "ustatus=" in line and "," in line.split("ustatus=")[1]]
        (self.logs / "nginx-retried.log").write_text("".join(line + "\n" for line in retried))

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # the database host
    def start_postgres(self) -> None:
        binaries = postgres_bin()
        if binaries is None:
            raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
        data = self.base / "pg"
        data.mkdir()
        shutil.chown(data, "postgres", "postgres")
        data.chmod(0o700)
        as_postgres = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
        subprocess.run(
            [*as_postgres, str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            cwd="/",
        )
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.config.subnet}.0/24 trust\n")
        settings = {
            "listen_addresses": f"{self.address('db')},127.0.0.1",
            "port": str(PG_PORT),
            "unix_socket_directories": str(data),
            "max_connections": str(self.config.pg_max_connections),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
        }
        argv = [*as_postgres, str(binaries / "postgres"), "-D", str(data)]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        self.postgres = self.net.popen("db", argv, log=self.logs / "postgres.log", cwd="/")
        self._wait(lambda: _connects(self.direct_dsn.replace(f"/{DATABASE}?", "/postgres?")), "PostgreSQL", 30)
        admin = psycopg2.connect(self.direct_dsn.replace(f"/{DATABASE}?", "/postgres?"))
        admin.autocommit = True
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {DATABASE}")
        admin.close()
        subprocess.run(
            [sys.executable, "-m", "aiorest", "migrate", *MIGRATE_ARGS, "--dsn", self.direct_dsn],
            cwd=ROOT,
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def start_pgbouncer(self) -> None:
        folder = self.base / "pgbouncer"
        folder.mkdir(exist_ok=True)
        folder.chmod(0o755)
        budget = self.config.budget()
        config = folder / "pgbouncer.ini"
        config.write_text(
            f"[databases]\n* = host=127.0.0.1 port={PG_PORT} user=postgres\n"
            "[pgbouncer]\n"
            f"listen_addr = {self.address('db')}\nlisten_port = {PGBOUNCER_PORT}\nunix_socket_dir =\n"
            f"auth_type = any\npool_mode = transaction\ndefault_pool_size = {self.config.pgbouncer_pool}\n"
            f"max_client_conn = {budget['pgbouncer_max_client_conn']}\nlogfile =\npidfile =\n"
            "log_connections = 0\nlog_disconnections = 0\nstats_period = 3600\n"
            "admin_users = postgres\nignore_startup_parameters = extra_float_digits,options\n"
        )
        config.chmod(0o644)
        log = self.logs / "pgbouncer.log"
        mark = log.stat().st_size if log.exists() else 0
        self.pgbouncer = self.net.popen("db", [PGBOUNCER, "-u", "postgres", str(config)], log=log)
        listening = f"listening on {self.address('db')}:{PGBOUNCER_PORT}".encode()
        self._wait(lambda: listening in log.read_bytes()[mark:], "PgBouncer", 10, self.pgbouncer)

    def restart_pgbouncer(self) -> None:
        """Stop PgBouncer at once (SIGTERM: every client connection dropped) and start it again."""
        assert self.pgbouncer is not None
        stop_process(self.pgbouncer, 5)
        self.start_pgbouncer()

    def pgbouncer_pools(self) -> list[dict[str, Any]]:
        """``SHOW POOLS`` of PgBouncer's admin console: one row per database and user."""
        admin = psycopg2.connect(
            f"postgresql://postgres@{self.address('db')}:{PGBOUNCER_PORT}/pgbouncer?sslmode=disable"
        )
        admin.autocommit = True
        try:
            with admin.cursor() as cursor:
                cursor.execute("SHOW POOLS")
                names = [column.name for column in cursor.description or ()]
                return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            admin.close()

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement on PostgreSQL itself (not through PgBouncer): its rows."""
        connection = psycopg2.connect(self.direct_dsn)
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute(query, params)
                return cursor.fetchall() if cursor.description else []
        finally:
            connection.close()

    # the redis host
    def start_redis(self) -> None:
        argv = [REDIS_SERVER, "--bind", self.address("redis"), "--port", str(REDIS_PORT), "--save", ""]
        argv += ["--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"]
        self.redis = self.net.popen("redis", argv, log=self.logs / "redis.log")
        self._wait(lambda: _redis_ping(self.address("redis")), "redis-server", 10, self.redis)

    def restart_redis(self, down: float = 0.0) -> None:
        """Stop redis-server (SIGTERM), wait ``down`` s, start it again: its data is gone (no persistence)."""
        assert self.redis is not None
        stop_process(self.redis, 5)
        time.sleep(down)
        self.start_redis()

    # the app hosts
    def app_env(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DATABASE_", "RATE_LIMIT", "SESSION_STORE"))
        }
        tmp = self.base / "tmp"  # the workers' metrics files go there, removed with the cluster
        tmp.mkdir(exist_ok=True)
        env.update(
            TMPDIR=str(tmp),
            PYTHONPATH=str(ROOT),
            DATABASE_URL=self.pooled_dsn,
            DATABASE_LISTEN_URL=self.direct_dsn,
            DATABASE_POOLER="transaction",
            DATABASE_POOL_TOTAL=str(self.config.pool_per_host),
            DATABASE_POOL_MIN=str(self.config.pool_min),
        )
        env["SESSION_STORE"] = self.redis_url if self.config.session_store == "redis" else "postgres"
        store = self.config.rate_limit_store
        if store == "redis":
            env["RATE_LIMIT_STORE"] = self.redis_url
        elif store == "postgres":
            env["RATE_LIMIT_STORE"] = "postgres"  # the app's own database, through PgBouncer
        return env

    def start_apps(self) -> None:
        for name in self.app_names:
            self.apps[name] = self._app_process(name)
        for name in self.app_names:  # started together, waited for in turn
            self._serve(self.apps[name])
        self.say(f"app hosts: {len(self.app_names)} x aiorest --workers {self.config.workers}")

    def _app_process(self, name: str) -> AiorestProcess:
        process = AiorestProcess(
            APP,
            "--workers", str(self.config.workers),
            "--forwarded-allow-ips", self.address("lb"),
            "--metrics",
            "--log-level", self.config.app_log_level,
            port=APP_PORT,
            host=self.address(name),
            prefix=self.net.command(name, []),
            env=self.app_env(),
            log_path=self.logs / f"{name}.log",
            ready_path="/json",
        )  # fmt: skip
        self.net.processes.append(process.launch())
        return process

    @staticmethod
    def _serve(process: AiorestProcess) -> None:
        try:
            process.wait_serving(60)
        except BaseException:
            process.kill()
            raise

    def restart_app(self, name: str) -> None:
        """Start host ``name``'s aiorest again (after a kill) and wait until it serves."""
        self.apps[name] = self._app_process(name)
        self._serve(self.apps[name])

    def kill_app_host(self, name: str) -> int:
        """SIGKILL every process of app host ``name``; how many there were."""
        return self.net.kill_all(name)

    def rolling_deploy(self, timeout: float = 60) -> list[float]:
        """SIGHUP each app host's aiorest in turn, the next once the last has reloaded; seconds each took."""
        took = []
        for name in self.app_names:
            app = self.apps[name]
            done = app.log().count("reload done")
            began = time.monotonic()
            app.send_signal(signal.SIGHUP)
            app.wait_for_log("reload done", count=done + 1, timeout=timeout)
            took.append(time.monotonic() - began)
        return took

    def metrics(self, name: str) -> dict[str, float]:
        """Host ``name``'s ``/metrics`` (summed over its workers): requests by status, pool size."""
        status, body = AiorestProcess.get(self.apps[name], "/metrics", timeout=5)
        if status != 200:
            raise RuntimeError(f"{name}/metrics answered {status}")
        figures: dict[str, float] = {"requests": 0.0}
        for line in body.decode().splitlines():
            if line.startswith("aiorest_requests_total{"):
                labels, value = line.rsplit(" ", 1)
                figures["requests"] += float(value)
                status_label = labels.split('status="', 1)[1].split('"', 1)[0]
                figures[f"status_{status_label}"] = figures.get(f"status_{status_label}", 0.0) + float(value)
            elif line.startswith(("aiorest_db_pool_size ", "aiorest_db_pool_in_use ", "aiorest_db_pool_max_size ")):
                key, value = line.split()
                figures[key.removeprefix("aiorest_db_")] = float(value)
        return figures

    def post_json(self, source: str, path: str, body: dict[str, str]) -> int:
        """The status of ``POST path`` with a JSON ``body`` sent to the balancer from host ``source`` (curl)."""
        command = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10"]
        command += ["-H", "Content-Type: application/json", "-d", json.dumps(body), f"{self.url}{path}"]
        done = subprocess.run(self.net.command(source, command), capture_output=True, text=True, timeout=20)
        return int(done.stdout or 0)

    def serving(self, name: str) -> bool:
        return probe((self.address(name), APP_PORT), "/json") == 200

    def _wait(self, ready: Any, what: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{what} exited with {process.returncode}; see {self.logs}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start within {timeout} s; see {self.logs}")
            time.sleep(0.1)


def _connects(dsn: str) -> bool:
    try:
        psycopg2.connect(dsn).close()
    except psycopg2.Error:
        return False
    return True


def _redis_ping(host: str) -> bool:
    import socket

    try:
        with socket.create_connection((host, REDIS_PORT), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False
