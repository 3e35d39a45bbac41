"""harness.processes.AiorestProcess, the subprocess the tests and load scripts serve from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from harness.processes import ROOT

RUN = textwrap.dedent("""
    import gc
    import json
    from pathlib import Path
    from harness.processes import AiorestProcess

    with AiorestProcess("tests.apps.hello_app:app") as server:
        assert server.get("/")[0] in (200, 404)
        folder = server.log_path.parent
        assert folder.name.startswith("aiorest-proc-") and folder.is_dir()
    assert "aiorest serving on" in server.log()  # still readable once stopped
    kept = AiorestProcess("tests.apps.hello_app:app")  # never started, still alive at exit
    del server
    gc.collect()
    print(json.dumps([path.name for path in Path(folder.parent).glob("aiorest-proc-*")]))
""")


def test_its_temporary_log_folders_are_removed(tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", RUN], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 1, done.stdout  # the folder of the object still alive
    assert list(tmp_path.glob("aiorest-proc-*")) == []  # and that one at exit
