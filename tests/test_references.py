"""What the docs and docstrings name exists: every dotted ``edgeprof.x.y`` reference in the package, the scripts,
the README and docs/ imports and resolves (after a package move, a stale path fails here), and no extra is
mentioned that pyproject.toml does not declare."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted([*(ROOT / "edgeprof").rglob("*.py"), *(ROOT / "scripts").glob("*.py"), ROOT / "README.md",
                *(ROOT / "docs").glob("*.md")])
REFERENCE = re.compile(r"(?<![\w/.-])edgeprof(?:\.[A-Za-z_]\w*)+(?![\w-])")
#: dotted names that are no Python objects: reply-metric keys, the personal-state key, the older wire record,
#: and the recipes' examples of a module one would add (docs: an AMD SMI-like meter, a device kind)
NOT_OBJECTS = {"edgeprof.wall_s", "edgeprof.cpu_s", "edgeprof.energy_j", "edgeprof.carbon_g", "edgeprof.personal",
               "edgeprof.profile", "edgeprof.meters.amdsmi_like", "edgeprof.nn.mydevice"}


def _resolves(reference: str) -> bool:
    parts = reference.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError as err:
            source = _source(parts[:i])
            if err.name and not err.name.startswith("edgeprof") and source is not None:
                return _defined(source, parts[i:])  # the module needs an extra this Python lacks
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _source(module: list[str]) -> Path | None:
    """The source file of an edgeprof module, found without importing it."""
    base = ROOT.joinpath(*module)
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _defined(path: Path, attrs: list[str]) -> bool:
    """``attrs`` (a name, a class's attribute, ...) is defined in ``path``'s source, read without importing it."""
    body: list = ast.parse(path.read_text()).body
    for attr in attrs:
        names = {}
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = node.body if isinstance(node, ast.ClassDef) else []
            for target in (node.targets if isinstance(node, ast.Assign) else
                           [node.target] if isinstance(node, ast.AnnAssign) else []):
                if isinstance(target, ast.Name):
                    names[target.id] = []
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update({(a.asname or a.name).split(".")[0]: [] for a in node.names})
        if attr not in names:
            return False
        body = names[attr]
    return True


def test_a_reference_into_a_module_whose_extra_is_missing_is_checked_in_its_source():
    """Where Flower is not installed (Python 3.10's dev extra), its modules are read, not imported."""
    source = ROOT / "edgeprof" / "flower" / "mod.py"

    assert _defined(source, ["make_profile_mod"]) and not _defined(source, ["no_such_mod"])
    assert _defined(ROOT / "edgeprof" / "flower" / "strategy.py", ["EdgeprofStrategy", "aggregate_train"])
    assert not _defined(ROOT / "edgeprof" / "flower" / "strategy.py", ["EdgeprofStrategy", "no_such_method"])


def test_every_dotted_reference_resolves():
    stale = sorted({f"{m.group(0)} ({path.relative_to(ROOT)})" for path in FILES
                    for m in REFERENCE.finditer(path.read_text()) if m.group(0) not in NOT_OBJECTS
                    and not _resolves(m.group(0))})
    assert stale == []


def test_no_extra_is_mentioned_that_pyproject_does_not_declare():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    mentioned = {name for path in FILES for m in re.finditer(r"(?:edgeprof|\.)\[([\w,]+)\]", path.read_text())
                 for name in m.group(1).split(",")}
    assert mentioned and mentioned <= extras, mentioned - extras
