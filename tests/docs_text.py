"""The documentation as the tests read it: README.md and the pages of the docs site (docs/*.md).

A test that checks what a page says reads that page through here, so that moving a section to another page
means changing the page name in one test, never copying text around. ``edgeprof_commands`` collects every
``edgeprof ...`` command line shown in a fenced code block, for ``tests/test_docs_commands.py``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<info>[\w+-]*)[^\n]*\n"
                    r"(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$", re.M | re.S)
_PROGRAM = re.compile(r"(?:^|(?<=\s))(?:\S*/)?edgeprof(?=\s|$)")


def pages() -> list[Path]:
    """README.md, then every page of the docs site in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page(name: str) -> str:
    """The text of one page, named by its path from the repository root (``README.md``, ``docs/flower.md``)."""
    return (ROOT / name).read_text(encoding="utf-8")


def all_text() -> str:
    """README.md and every docs page, one after the other."""
    return "\n".join(p.read_text(encoding="utf-8") for p in pages())


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced code block of ``text`` as (info string, body), in order."""
    return [(m.group("info").lower(), m.group("body")) for m in _FENCE.finditer(text)]


def _strip_comment(line: str) -> str:
    """``line`` without its shell comment (a ``#`` after white space, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def shell_lines(text: str) -> list[str]:
    """Every command line of the shell blocks of ``text``: comments dropped, ``\\`` continuations joined,
    runs of white space made one space."""
    lines = []
    for info, body in fenced_blocks(text):
        if info not in SHELL_BLOCKS:
            continue
        pending = ""
        for raw in body.splitlines():
            pending += raw
            if pending.rstrip().endswith("\\"):
                pending = pending.rstrip()[:-1] + " "
                continue
            line = " ".join(_strip_comment(pending).split())
            pending = ""
            if line:
                lines.append(line)
    return lines


def command(name: str, prefix: str) -> str:
    """The one command line of page ``name`` that starts with ``prefix``."""
    found = [line for line in shell_lines(page(name)) if line.startswith(prefix)]
    assert len(found) == 1, f"{name}: {len(found)} command lines start with {prefix!r}"
    return found[0]


def edgeprof_command(line: str) -> str | None:
    """The ``edgeprof ...`` invocation in a shell line (``.venv/bin/edgeprof`` counts as ``edgeprof``), up to a
    ``&&``, ``||``, ``;``, ``|`` or redirection that ends it; None when the line runs no edgeprof."""
    m = _PROGRAM.search(line)
    if m is None:
        return None
    words = []
    for word in line[m.end():].split():
        if word in ("&&", "||", ";", "|") or re.match(r"\d?>", word):
            break
        words.append(word)
    return " ".join(["edgeprof", *words])


def edgeprof_commands() -> list[tuple[str, str]]:
    """Every ``edgeprof ...`` command shown in a fenced shell block, as (page, command), in page order."""
    found = []
    for path in pages():
        for line in shell_lines(path.read_text(encoding="utf-8")):
            cmd = edgeprof_command(line)
            if cmd is not None:
                found.append((str(path.relative_to(ROOT)), cmd))
    return found
