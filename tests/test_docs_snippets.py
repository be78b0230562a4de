"""Every Python snippet the README and the docs site show runs as shown.

A snippet is run here, as it stands, in a fresh interpreter in a folder of its own (the repository's
``profiles/reference`` reachable there), unless ``ELSEWHERE`` names the test that runs it (a recipe whose parts a
test puts in place, an example whose file a test runs and whose code the page is checked to show); that test
must exist. A snippet no entry covers and that is not run here fails, as does an entry no page shows any more.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from docs_text import ROOT, fenced_blocks, pages

#: a snippet's first line -> the test that runs it
ELSEWHERE = {
    "# edgeprof/nn/mydevice.py":
        "tests/test_architecture.py::test_the_device_kind_recipe_is_one_class_and_one_registry_line",
    "# edgeprof/meters/amdsmi_like.py: probe(ctx) -> ProbeResult, class AmdSmiLikeMeter(Meter) taking ctx, and:":
        "tests/test_meters_registry.py::test_the_docs_recipe_adds_a_meter_in_ten_lines",
    "import argparse": "tests/test_examples.py::test_the_pytorch_example_runs_as_a_script",
    "import torch": "tests/test_examples.py::test_the_flower_example_runs_in_process",
}


def _snippets() -> list[tuple[str, str]]:
    found = []
    for path in pages():
        for info, body in fenced_blocks(path.read_text(encoding="utf-8")):
            if info == "python":
                found.append((str(path.relative_to(ROOT)), body))
    return found


SNIPPETS = _snippets()
RUN_HERE = [(page, body) for page, body in SNIPPETS if body.splitlines()[0] not in ELSEWHERE]


def test_every_snippet_is_run_here_or_by_a_named_test_and_every_entry_is_shown():
    firsts = {body.splitlines()[0] for _, body in SNIPPETS}

    assert len(SNIPPETS) >= 8 and len(RUN_HERE) >= 4
    assert [first for first in ELSEWHERE if first not in firsts] == [], "an entry that no page shows"
    for reference in set(ELSEWHERE.values()):
        path, _, name = reference.partition("::")
        tree = ast.parse((ROOT / path).read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body), f"{reference} is missing"


@pytest.mark.parametrize("page,code", RUN_HERE, ids=[f"{p}:{c.splitlines()[0][:40]}" for p, c in RUN_HERE])
def test_the_snippet_runs_as_shown(page, code, tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "reference").symlink_to(ROOT / "profiles" / "reference")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=env)

    assert done.returncode == 0, f"{page}:\n{code}\n{done.stderr[-3000:]}"
