"""Run the Autobahn|Testsuite against aiorest's WebSockets: ``python -m tests.server.autobahn``.

Starts an aiorest echo server (text and bytes back as they came) on 127.0.0.1 and runs
``wstest -m fuzzingclient`` (Autobahn|Testsuite 0.8.2, Python 2.7 only) against it, then
reads ``<reports>/index.json`` and prints the cases per behavior (OK, NON-STRICT,
INFORMATIONAL, UNIMPLEMENTED, FAILED) and each FAILED case. Exits 1 if any case FAILED.

wstest needs Python 2.7: the first run installs ``autobahntestsuite==0.8.2`` (Twisted 20.3,
autobahn 0.10.9) with ``pip install --target`` into ``--env`` (default
~/.cache/aiorest/autobahn), from the package registry, with pyenv's 2.7 (or ``python2.7`` on
PATH, or ``--python``). Not a pytest test (no ``test_`` prefix), not in CI: all the cases
take minutes.

By default the route's limits let a message be 20 MiB (the 9.* cases send up to 16 MiB);
``--default-limits`` keeps :class:`~aiorest.WebSocketLimits`' defaults (1 MiB), and the
larger 9.* cases are then closed 1009, which Autobahn reports as FAILED (listed with their
close code). ``--exclude '12.*' '13.*'`` leaves out permessage-deflate.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from aiorest import WebSocketLimits
from aiorest.server import Server
from tests.server.ws_frames import echo_app

PACKAGE = "autobahntestsuite==0.8.2"
BEHAVIORS = ("OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED")
LARGE = WebSocketLimits(max_message=20 * 1024 * 1024)
WSTEST = "import site, sys; site.addsitedir(sys.argv.pop(1)); from autobahntestsuite.wstest import run; run()"


def python27(given: str | None) -> str:
    if given:
        return given
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(os.path.join(root, "versions", "2.7*", "bin", "python2.7")))
    if found:
        return found[-1]
    on_path = shutil.which("python2.7")
    if on_path:
        return on_path
    sys.exit("no Python 2.7: install one with pyenv (pyenv install 2.7.18) or give --python")


def ensure_env(python: str, env: Path) -> None:
    """Install autobahntestsuite into ``env`` unless it is there (needs the package registry)."""
    if (env / "autobahntestsuite" / "wstest.py").exists():
        return
    print(f"installing {PACKAGE} into {env} with {python} (from the package registry)")
    env.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "pip", "install", "--target", str(env), PACKAGE], check=True)


async def run_wstest(args: argparse.Namespace, python: str, reports: Path) -> int:
    limits = WebSocketLimits() if args.default_limits else LARGE
    server = Server(echo_app(limits, "/"), host="127.0.0.1", port=0)
    await server.start()
    try:
        spec = {
            "outdir": str(reports),
            "servers": [{"agent": "aiorest", "url": f"ws://127.0.0.1:{server.port}/"}],
            "cases": args.cases,
            "exclude-cases": args.exclude,
            "exclude-agent-cases": {},
        }
        spec_file = reports / "fuzzingclient.json"
        spec_file.write_text(json.dumps(spec, indent=2))
        with open(reports / "wstest.log", "wb") as log:
            command = [python, "-c", WSTEST, str(args.env), "-m", "fuzzingclient", "-s", str(spec_file)]
            process = await asyncio.create_subprocess_exec(*command, stdout=log, stderr=subprocess.STDOUT)
            return await process.wait()
    finally:
        await server.stop(timeout=5)


def summarize(reports: Path) -> int:
    results = json.loads((reports / "index.json").read_text())["aiorest"]
    counts = collections.Counter(result["behavior"] for result in results.values())
    print(f"{len(results)} cases: " + ", ".join(f"{name} {counts.get(name, 0)}" for name in BEHAVIORS))
    failed = sorted((case for case, r in results.items() if r["behavior"] == "FAILED"), key=case_key)
    for case in failed:
        result = results[case]
        print(f"  FAILED {case}: close {result['behaviorClose']}, remote code {result['remoteCloseCode']}")
    print(f"reports: {reports / 'index.html'}")
    return 1 if failed else 0


def case_key(case: str) -> tuple[int, ...]:
    return tuple(int(part) for part in case.split("."))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["*"], help="case patterns (default: all)")
    parser.add_argument("--exclude", nargs="*", default=[], help="case patterns to leave out, e.g. '12.*' '13.*'")
    parser.add_argument("--default-limits", action="store_true", help="WebSocketLimits() (1 MiB), not 20 MiB")
    parser.add_argument("--env", type=Path, default=Path("~/.cache/aiorest/autobahn").expanduser())
    parser.add_argument("--python", help="a Python 2.7 (default: pyenv's, then python2.7 on PATH)")
    parser.add_argument("--reports", type=Path, default=Path("autobahn-reports"), help="wstest's output directory")
    args = parser.parse_args()
    python = python27(args.python)
    ensure_env(python, args.env)
    reports = args.reports.resolve()
    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir(parents=True)
    code = asyncio.run(run_wstest(args, python, reports))
    if code != 0 or not (reports / "index.json").exists():
        print(f"wstest exited {code}: see {reports / 'wstest.log'}")
        return 2
    return summarize(reports)


if __name__ == "__main__":
    sys.exit(main())
