"""The layers of aiorest (PLAN-28 §2, DESIGN.md): each package imports only the ones below it.

Every import in aiorest/ is read with ast: at module level, under ``TYPE_CHECKING`` and inside
functions. An import that runs upward fails, and so does a cycle between packages, unless it is in
ALLOWLIST: today's known violations, each removed by the plan step named beside it. The allowlist
is exact: an edge listed that no longer exists fails too, so that it shrinks as the steps land.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aiorest"

#: Lowest first. Packages of equal rank (middleware and security; the tools at the top) may import
#: each other; the cycle check below still forbids a circle between them.
RANK = {
    "_support": 0,
    "http": 1,
    "routing": 2,
    "typed": 3,
    "db": 4,
    "middleware": 5,
    "security": 5,
    "app": 6,
    "ops": 7,
    "server": 8,
    "cli": 9,
    "testing": 9,
    "pytest_plugin": 9,
    "_pytest_aiohttp": 9,
}
#: db sits beside the stack: it may import only these.
BESIDE = {"db": {"_support", "http"}}
#: aiorest/__init__.py and __main__ only re-export or start: they are above everything.
TOP = 10

#: App.run reaches the runner lazily, as a convenience (DESIGN.md): the one upward import allowed for good.
PERMANENT = {("aiorest.app.application", "aiorest.server.server")}

#: (importer, imported) -> the PLAN-28 step that removes the edge. Empty: every layer leak is cut;
#: an edge that must wait for a fix goes here with the step or issue that removes it.
ALLOWLIST: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    kind: str  # "module", "TYPE_CHECKING" or "function"
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    relative = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    return (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative / "__init__.py").is_file()


def _kinds(tree: ast.Module) -> dict[ast.AST, str]:
    """Each import node and where it stands: at module level, under TYPE_CHECKING, or in a function."""
    kinds: dict[ast.AST, str] = {}

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, "function")
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for inner in child.body:
                    kinds[inner] = kind if kind == "function" else "TYPE_CHECKING"
                    visit(inner, kind if kind == "function" else "TYPE_CHECKING")
                for inner in child.orelse:
                    kinds[inner] = kind
                    visit(inner, kind)
            else:
                kinds[child] = kind
                visit(child, kind)

    visit(tree, "module")
    return kinds


def all_imports() -> list[Import]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        kinds = _kinds(tree)
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, node.module] if node.module else base)
                else:
                    module = node.module or ""
                # ``from . import requestid`` imports a module; ``from .x import Name`` imports from x
                submodules = [f"{module}.{alias.name}" for alias in node.names]
                targets = [name for name in submodules if _is_module(name)] or [module]
            for target in targets:
                if target == "aiorest" or target.startswith("aiorest."):
                    found.append(Import(importer, target, kinds.get(node, "module"), node.lineno))
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else "<top>"


def rank(module: str) -> int:
    if module == "aiorest":  # the package itself (cli reads __version__): as high as the tools
        return RANK["cli"]
    return RANK.get(layer(module), TOP)


def allowed(imp: Import) -> bool:
    source, target = layer(imp.importer), layer(imp.imported)
    if source == "<top>" or source == target:
        return True
    if source in BESIDE and target not in BESIDE[source]:
        return False
    return rank(imp.imported) <= rank(imp.importer)


def test_every_module_has_a_layer():
    """A new top-level module must be placed in a layer: no module at the top only forwards names (issue 35)."""
    top = {
        _module_name(path)
        for path in PACKAGE.glob("*.py")
        if path.stem not in RANK and path.stem not in {"__init__", "__main__"}
    }
    assert top == set(), f"modules at the top of aiorest/ in no layer: {sorted(top)}"


def test_imports_run_downward():
    upward = {(imp.importer, imp.imported): imp for imp in all_imports() if not allowed(imp)}
    unexpected = sorted(
        f"{imp.importer}:{imp.line} imports {imp.imported} ({imp.kind}): {layer(imp.importer)} -> {layer(imp.imported)}"
        for edge, imp in upward.items()
        if edge not in ALLOWLIST and edge not in PERMANENT
    )
    assert not unexpected, "imports that run upward:\n" + "\n".join(unexpected)
    gone = sorted(f"{a} -> {b} ({step})" for (a, b), step in ALLOWLIST.items() if (a, b) not in upward)
    assert not gone, "allowlisted edges that no longer exist (remove them from ALLOWLIST):\n" + "\n".join(gone)
    assert set(upward) >= PERMANENT


def test_no_cycle_between_packages():
    graph: dict[str, set[str]] = {}
    for imp in all_imports():
        edge = (imp.importer, imp.imported)
        source, target = layer(imp.importer), layer(imp.imported)
        if source != target and "<top>" not in (source, target) and edge not in ALLOWLIST and edge not in PERMANENT:
            graph.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    circles = sorted(f"{a} -> {b} -> … -> {a}" for a, targets in graph.items() for b in targets if reaches(b, a, {b}))
    assert not circles, "packages in a circle:\n" + "\n".join(circles)


def test_the_checker_sees_every_kind_of_import():
    """The reader itself: a function-level and a TYPE_CHECKING import are both found."""
    kinds = {(imp.importer, imp.imported): imp.kind for imp in all_imports()}
    assert kinds[("aiorest.app.application", "aiorest.server.server")] == "function"
    assert kinds[("aiorest.ops.accesslog", "aiorest.http.request")] == "TYPE_CHECKING"
    assert kinds[("aiorest.server.protocol", "aiorest.server.driving")] == "module"
