"""The committed results are the ones the pages cite, and they stay small (issue 35, point 5).

Raw runs go to ``load/out/`` and ``bench/out/``, which git ignores; ``load/results/`` and
``bench/results/`` keep the summaries and plots that README.md, load/README.md,
bench/README.md, docs/ and the results' own README pages name.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = (ROOT / "load" / "results", ROOT / "bench" / "results")
LIMIT = 1_000_000  # bytes, everything under both folders

#: A path with "results/" in it, as the pages write them: `results/x.md`, ``bench/results/limiter-*.md``,
#: bench/results/typed-2026-11-24.{md,png}, (../bench/results/idempotency.md), results/cluster-sessions/.
CITED = re.compile(r"(?:[\w.-]+/)*results/[\w.*{},/<>-]*")


def pages() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "load" / "README.md", ROOT / "bench" / "README.md"]
    found += sorted((ROOT / "docs").rglob("*.rst")) + sorted((ROOT / "docs").rglob("*.inc"))
    found += [page for folder in RESULTS for page in sorted(folder.rglob("README.md"))]
    return found


def citations(page: Path) -> list[str]:
    """The results paths a page names, from the repository's root, braces expanded; a folder ends in /."""
    found = []
    for cited in CITED.findall(page.read_text()):
        cited = cited.rstrip(".,")
        if "<" in cited or cited.rstrip("/").endswith("results"):
            continue  # a pattern of a run's folder (<time>), or the folder of all results: no citation
        base = ROOT if cited.startswith(("load/results", "bench/results")) else page.parent
        path = (base / cited).resolve().relative_to(ROOT).as_posix() + ("/" if cited.endswith("/") else "")
        braces = re.search(r"\{([^}]*)\}", path)
        options = braces.group(1).split(",") if braces else []
        found += [path.replace(braces.group(0), option) for option in options] if braces else [path]
    return found


def committed() -> list[str]:
    return [p.relative_to(ROOT).as_posix() for folder in RESULTS for p in sorted(folder.rglob("*")) if p.is_file()]


def test_what_the_pages_cite_is_there() -> None:
    cited = [(page.relative_to(ROOT).as_posix(), path) for page in pages() for path in citations(page)]
    assert ("load/README.md", "load/results/wrk-db/summary.md") in cited
    assert ("docs/auth.rst", "bench/results/limiter-*.md") in cited
    missing = [(page, path) for page, path in cited if not list(ROOT.glob(path.rstrip("/")))]
    assert missing == []


def test_every_committed_result_is_cited_by_a_page() -> None:
    cited = {path for page in pages() for path in citations(page)}
    uncited = [
        name
        for name in committed()
        if not name.endswith("/README.md")
        and not any(fnmatch.fnmatch(name, path + "*" if path.endswith("/") else path) for path in cited)
        and not any(name.startswith(path.rstrip("/") + "/") for path in cited)
    ]
    assert uncited == [], "a raw run belongs in load/out/ or bench/out/ (git-ignored), or a page cites it"


def test_what_is_committed_under_results_stays_under_a_megabyte() -> None:
    total = sum((ROOT / name).stat().st_size for name in committed())
    assert 0 < total < LIMIT, f"{total:,} bytes under load/results/ and bench/results/"
