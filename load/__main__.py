"""``python -m load COMMAND …``: the load suite's one entry point (see load/README.md).

Each command is the ``main(argv)`` of the module that runs it, imported only when
chosen: ``--help`` stays fast, and a scenario's tools (locust, matplotlib) are
needed only by the scenario that uses them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# command words -> (module whose main(argv) runs it, what it does); "production pooler" before "production"
COMMANDS: dict[tuple[str, ...], tuple[str, str]] = {
    ("compare",): ("load.compare.run", "aiorest against the threaded baselines, round after round"),
    ("compare", "plots"): ("load.compare.plots", "draw a comparison's figures again from its summary.json"),
    ("production",): ("load.production.run", "the production bar: failover, drains, admission, pool, costs"),
    ("production", "admission"): ("load.production.admission", "admission control under a 10x overload"),
    ("production", "pooler"): ("load.production.pooler", "/db through PgBouncer against a direct connection"),
    ("production", "restarts"): ("load.production.restarts", "SIGHUPs under steady load on an app of your own"),
    ("live",): ("load.live.run", "10,000 WebSockets and 10,000 event streams on one process, broadcast to"),
    ("cluster",): ("load.cluster.run", "a cluster of hosts out of network namespaces, loaded and faulted (root)"),
    ("steady",): ("harness.steady", "a steady, paced load that counts every failed request"),
}


def usage() -> str:
    lines = ["usage: python -m load COMMAND [options]   (python -m load COMMAND --help)", "", "commands:"]
    width = max(len(" ".join(words)) for words in COMMANDS)
    lines += [f"  {' '.join(words):<{width}}  {what}" for words, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    for length in (2, 1):  # the longest command that the words start with
        words = tuple(args[:length])
        if words in COMMANDS:
            module = importlib.import_module(COMMANDS[words][0])
            return int(module.main(args[length:]) or 0)
    print(f"python -m load: no command {args[0]!r}\n\n{usage()}", file=sys.stderr)
    return 2


raise SystemExit(main(sys.argv[1:]))
