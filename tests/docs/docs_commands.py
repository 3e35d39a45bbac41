"""The shell commands of README.md, deploy/README.md, docs/quickstart.rst and the deployment pages, as written.

Read from the pages' code blocks (Markdown's ```sh fences, reStructuredText's
``code-block:: sh``/``console`` and literal ``::`` blocks), so that
tests/docs/test_docs_commands.py runs what a reader copies, and a page edited breaks
its test. A command is one line (continuation lines joined); in a ``console``
block, the lines after a ``$ `` prompt are its sample output.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (
    "README.md",
    "deploy/README.md",
    "docs/quickstart.rst",
    *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs" / "deployment").glob("*.inc")),
)
#: The programs the pages' commands start with; a line of a literal block starting otherwise is not a command.
PROGRAMS = frozenset(
    {"aiorest", "python", "python3", "pip", "nginx", "sed", "mkdir", "cp", "curl", "kill", "systemctl", "sphinx-build"}
)
#: A line that only sets a shell variable for the lines after it (``PREFIX=/srv/aiorest-nginx``).
ASSIGNMENT = re.compile(r"[A-Z_]+=\S+")
_SHELL_DIRECTIVE = re.compile(r"^\s*\.\. code-block:: (sh|bash|console|shell)\s*$")


@dataclass
class Command:
    page: str
    line: str  # the command, continuation lines joined
    block: int  # which block of the page (0, 1, ...): the commands of one block run in one shell
    output: list[str] = field(default_factory=list)  # a console block's sample output

    @property
    def words(self) -> list[str]:
        return shlex.split(self.line, comments=True)

    @property
    def program(self) -> str:
        words = [word for word in self.line.split() if not re.fullmatch(r"[A-Z_]+=\S*", word)]
        return words[0] if words else ""

    def __str__(self) -> str:
        return f"{self.page}: {self.line}"


def _rst_blocks(text: str) -> list[tuple[bool, list[str]]]:
    """(console?, dedented lines) of every shell or literal block of a reStructuredText page."""
    lines = text.splitlines()
    blocks = []
    for number, line in enumerate(lines):
        shell = _SHELL_DIRECTIVE.match(line)
        if not shell and not (line.rstrip().endswith("::") and not line.lstrip().startswith(".. ")):
            continue
        indent = len(line) - len(line.lstrip())
        body: list[str] = []
        for following in lines[number + 1 :]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            if shell and not body and following.strip().startswith(":"):
                continue  # the directive's options
            body.append(following)
        content = [entry for entry in body if entry.strip()]
        margin = min((len(entry) - len(entry.lstrip()) for entry in content), default=0)
        blocks.append((bool(shell and shell.group(1) == "console"), [entry[margin:] for entry in body]))
    return blocks


def _md_blocks(text: str) -> list[tuple[bool, list[str]]]:
    return [
        (kind == "console", block.splitlines())
        for kind, block in re.findall(r"```(sh|bash|console|shell)\n(.*?)```", text, re.DOTALL)
    ]


def _join_continuations(lines: list[str]) -> list[str]:
    joined: list[str] = []
    carry = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            carry += line.rstrip()[:-1].rstrip() + " "
        else:
            joined.append(carry + line.strip() if carry else line)
            carry = ""
    return joined


def commands(page: str) -> list[Command]:
    """Every command of ``page`` (a path relative to the checkout), in order."""
    text = (ROOT / page).read_text()
    blocks = _md_blocks(text) if page.endswith(".md") else _rst_blocks(text)
    found: list[Command] = []
    for index, (console, lines) in enumerate(blocks):
        current: Command | None = None
        for line in _join_continuations(lines):
            if console and not line.startswith("$ "):
                if current is not None:
                    current.output.append(line)
                continue
            line = line[2:] if console else line.strip()
            command = Command(page, line, index)
            if command.program in PROGRAMS or ASSIGNMENT.fullmatch(line):
                found.append(current := command)
    return found


def every_command() -> list[Command]:
    return [command for page in PAGES for command in commands(page)]


def before(command: Command) -> list[Command]:
    """The commands of ``command``'s block that come before it (what a reader has run by then)."""
    block = [other for other in commands(command.page) if other.block == command.block]
    return block[: block.index(command)]
