"""``python -m load compare …`` (see load/README.md)."""

import sys

from .compare import main

if len(sys.argv) < 2 or sys.argv[1] != "compare":
    raise SystemExit("usage: python -m load compare [options]  (python -m load compare --help)")
raise SystemExit(main(sys.argv[2:]))
