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
