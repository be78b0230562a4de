"""The drivers name no algorithm: everything algorithm-specific is in the algorithm's own module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edgeprof.algorithms import ALGORITHMS, REGISTRY

PACKAGE = Path(__file__).resolve().parents[1] / "edgeprof"
DRIVERS = sorted((PACKAGE / "flower").glob("*.py")) + [PACKAGE / "simulate.py", PACKAGE / "federation.py",
                                                       PACKAGE / "sweep.py", PACKAGE / "report" / "session.py"]


@pytest.mark.parametrize("path", DRIVERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_algorithm_is_named_in_a_driver(path):
    text = path.read_text()
    names = [n for n in ALGORITHMS if re.search(rf"\b{re.escape(n)}\b", text, flags=re.IGNORECASE)]
    # sweep.py may name the two sides of the claim it checks (its defaults), nothing else
    allowed = {"pflego", "fedavg"} if path.name == "sweep.py" else set()
    assert set(names) <= allowed, f"{path.name} names {names}"


def test_every_registry_line_points_at_a_spec_of_that_name():
    for name, target in REGISTRY.items():
        spec = ALGORITHMS[name]
        assert spec.name == name and target.endswith((":SPEC", ":FEDSIM", ":FEDALT"))
        assert spec.phases and spec.engines and callable(spec.client) and callable(spec.server)


# ---------------------------------------------------------------------------------------------------- compute seam

#: what moves a tensor between host and device, or makes one on the default device: only the seam may
HOST_DEVICE = re.compile(r"\.numpy\(\)|from_numpy\(|torch\.tensor\(|\.cpu\(\)|\.cuda\(|\.to\(|\bset_params\(|"
                         r"\bget_params\(|torch\.(ones|zeros|empty|full|arange|rand|randn)\(|\.synchronize\(")


def _py(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _py(PACKAGE / "algorithms") + [PACKAGE / "federation.py", PACKAGE / "runtime.py"],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_tensors_cross_between_host_and_device_only_through_the_compute_seam(path):
    """Placements, copies and synchronisation go through :class:`edgeprof.nn.compute.Compute`; a line that builds a
    tensor on the host before the module is placed says so with ``# host-only``."""
    bad = [f"{path.name}:{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1)
           if HOST_DEVICE.search(line.split("#")[0]) and "# host-only" not in line]
    assert not bad, "\n".join(bad)


def test_one_runtime_factory_builds_every_runtime():
    """``Runtime(`` is called in edgeprof.runtime alone; the in-process driver and both Flower apps call it."""
    callers = [p for p in _py(PACKAGE) if re.search(r"(?<![\w.])Runtime\(", p.read_text())
               and p.name != "contract.py"]
    assert [p.relative_to(PACKAGE).as_posix() for p in callers] == ["runtime.py"]
    for driver in ("federation.py", "flower/client_app.py", "flower/strategy.py"):
        assert "build_runtime(" in (PACKAGE / driver).read_text(), driver


def test_no_execution_plan_or_compute_has_a_default():
    """A forgotten argument must fail, not silently run some other plan or device: no parameter typed
    ExecutionPlan or Compute has a default, and no module keeps a chosen plan."""
    import ast

    found = []
    for path in _py(PACKAGE):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, _ in pairs:
                annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if re.search(r"\b(ExecutionPlan|Compute)\b", annotation):
                    found.append(f"{path.name}:{node.lineno} {node.name}({arg.arg})")
        text = path.read_text()
        if re.search(r"\bLEGACY\b|_CHOSEN\b|def chosen\(", text):
            found.append(f"{path.name}: a module-level plan")
    assert not found, found
