"""Start-up and exit of the default command, before and after a change: how much of its wall time is rounds.

Runs ``edgeprof measure --algo pflego --tau 50`` (``--out`` a fresh temporary folder each time) as a new
process, from a temporary folder, for two trees: "before", a ``git worktree`` of ``--before REV``, and
"after", this checkout as it is (uncommitted changes included; ``--after REV`` makes it a worktree of that
revision too, to compare two commits alone). Each tree runs through the console entry point its own
``pyproject.toml`` names (``[project.scripts] edgeprof``), with the same Python and ``PYTHONPATH`` set to
the tree, so that its ``edgeprof`` package is the one imported (checked once). Each has its own fresh
``EDGEPROF_CACHE_DIR``, filled by one unmeasured run, so that every measured run finds its ONNX export on
disk as a second run on a machine does. The measured runs alternate (before, after, after, before, ...) so
that a change in the machine's load falls on both.

For each run it prints: the wall time around the process (start to exit), the rounds (the sum of the
``wall_s`` of the report's ``client`` and ``server`` rows: the profiled windows), the time outside them
(seconds, and as a fraction of the wall time), and the tail (from the last line the process printed to its
exit). Then the median of each column for each tree, the difference of the median walls, and the CPU model
and the load average at the start and at the end.

``--before`` defaults to the parent of the commit that added this script (the tree without the fast start);
``--bytecode`` lets both trees cache their compiled modules (``PYTHONPYCACHEPREFIX`` in a temporary folder,
``PYTHONDONTWRITEBYTECODE`` unset) as an installed package does, where the environment forbids it.

    python scripts/bench_start.py [--runs 5] [--before REV] [--after REV] [--bytecode]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
COMMAND = ("measure", "--algo", "pflego", "--tau", "50")
#: the kinds of report rows whose windows are the rounds: each client round and each server step
ROUND_KINDS = ("client", "server")


@dataclass
class Tree:
    """One side of the comparison: a source tree and the environment its runs get."""

    name: str
    path: Path
    env: dict

    def entry(self) -> str:
        """``python -c`` code doing what the console script of this tree's pyproject.toml does."""
        text = (self.path / "pyproject.toml").read_text()
        found = re.search(r'^edgeprof\s*=\s*"([\w.]+):(\w+)"', text, re.M)
        if not found:
            raise SystemExit(f"{self.path}/pyproject.toml names no 'edgeprof' console script")
        module, attr = found.groups()
        return f"import sys; sys.argv[0] = 'edgeprof'; from {module} import {attr}; sys.exit({attr}())"


@dataclass
class Run:
    tree: str
    total_s: float
    rounds_s: float
    tail_s: float

    def cells(self) -> tuple[float, ...]:
        """The table's columns: wall, rounds, the time outside them (seconds, fraction of the wall), tail."""
        return (self.total_s, self.rounds_s, self.total_s - self.rounds_s, 1 - self.rounds_s / self.total_s,
                self.tail_s)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout.strip()


def default_before() -> str:
    """The parent of the commit that added this script; HEAD while it is not committed yet."""
    added = git("log", "--diff-filter=A", "--format=%H", "--", "scripts/bench_start.py").splitlines()
    return f"{added[-1]}~1" if added else "HEAD"


def measure_once(tree: Tree, work: Path) -> Run:
    """One run of the command in a fresh --out folder: wall, rounds and tail, from the process and its report."""
    out = Path(tempfile.mkdtemp(prefix="out-", dir=work))
    args = [sys.executable, "-c", tree.entry(), *COMMAND, "--out", str(out)]
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=work, env=tree.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    last = start
    lines = []
    for line in proc.stdout:
        last = time.perf_counter()
        lines.append(line.decode(errors="replace"))
    code = proc.wait()
    end = time.perf_counter()
    if code != 0:
        raise SystemExit(f"{tree.name}: exit {code}\n{''.join(lines[-20:])}")
    reports = list(out.glob("*.csv"))
    if len(reports) != 1:
        raise SystemExit(f"{tree.name}: expected one report in {out}, found {len(reports)}")
    sidecar = json.loads(reports[0].with_suffix(".json").read_text())
    if sidecar.get("status") != "complete":
        raise SystemExit(f"{tree.name}: the sidecar says {sidecar.get('status')!r}, not 'complete'")
    with reports[0].open(newline="") as f:
        rounds = sum(float(row["wall_s"]) for row in csv.DictReader(f) if row["kind"] in ROUND_KINDS)
    shutil.rmtree(out)
    return Run(tree.name, end - start, rounds, end - last)


def check_import(tree: Tree) -> None:
    """The tree's own edgeprof is the one its runs import (PYTHONPATH comes before the editable install)."""
    where = subprocess.run([sys.executable, "-c", "import edgeprof; print(edgeprof.__file__)"], env=tree.env,
                           cwd=tempfile.gettempdir(), check=True, capture_output=True, text=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.path.resolve()):
        raise SystemExit(f"{tree.name}: imports {where}, not the package of {tree.path}")


def tree_env(path: Path, cache: Path, bytecode: Path | None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(path), EDGEPROF_CACHE_DIR=str(cache))
    if bytecode is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    return env


def cpu_model() -> str:
    sys.path.insert(0, str(REPO))
    from edgeprof.host import cpu_model as model

    return model()


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"


HEADER = f"{'wall s':>8s} {'rounds s':>9s} {'outside s':>10s} {'outside':>8s} {'tail s':>7s}"


def cells(values: Sequence[float]) -> str:
    total, rounds, outside_s, outside, tail = values
    return f"{total:8.3f} {rounds:9.3f} {outside_s:10.3f} {outside:8.1%} {tail:7.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each tree (default 5)")
    parser.add_argument("--before", default=None, help="revision of the 'before' tree (default: the parent of "
                        "the commit that added this script)")
    parser.add_argument("--after", default=None, help="revision of the 'after' tree (default: this checkout "
                        "as it is, uncommitted changes included)")
    parser.add_argument("--bytecode", action="store_true", help="let both trees cache compiled modules")
    args = parser.parse_args()
    revisions = {"before": args.before or default_before(), "after": args.after}
    commits = {name: git("rev-parse", "--short", f"{rev}^{{commit}}") for name, rev in revisions.items() if rev}
    changed = len(git("status", "--porcelain").splitlines())
    after = f"{revisions['after']} ({commits['after']})" if args.after else \
        f"{REPO} as it is now ({changed} paths differ from HEAD)"
    print(f"cpu: {cpu_model()}, {os.cpu_count()} logical cores; load average {load()} (1, 5, 15 min)")
    print(f"command: edgeprof {' '.join(COMMAND)} --out <fresh folder>; before = {revisions['before']} "
          f"({commits['before']}), after = {after}; {args.runs} runs each, alternating"
          + ("; compiled modules cached" if args.bytecode else ""))
    work = Path(tempfile.mkdtemp(prefix="bench-start-"))
    paths = {name: work / name for name in commits}
    try:
        for name, path in paths.items():
            git("worktree", "add", "--detach", str(path), commits[name])
        bytecode = work / "pycache" if args.bytecode else None
        trees = []
        for name in ("before", "after"):
            path = paths.get(name, REPO)
            trees.append(Tree(name, path, tree_env(path, work / f"cache-{name}", bytecode)))
        for tree in trees:
            check_import(tree)
            measure_once(tree, work)  # fills its ONNX export cache (and, with --bytecode, its compiled modules)
        runs: list[Run] = []
        print(f"\n{'run':<4s} {'tree':<7s} {HEADER}")
        for i in range(args.runs):
            for tree in (trees if i % 2 == 0 else trees[::-1]):
                run = measure_once(tree, work)
                runs.append(run)
                print(f"{i + 1:<4d} {tree.name:<7s} {cells(run.cells())}", flush=True)
        print(f"\n{'medians':<12s} {HEADER}")
        for tree in trees:
            columns = zip(*(r.cells() for r in runs if r.tree == tree.name))
            print(f"{tree.name:<12s} {cells([statistics.median(c) for c in columns])}")
        wall = [statistics.median(r.total_s for r in runs if r.tree == t.name) for t in trees]
        print(f"after - before: {wall[1] - wall[0]:+.3f} s wall ({wall[1] / wall[0] - 1:+.1%})")
        print(f"load average at the end: {load()}")
    finally:
        for path in paths.values():
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=False,
                           capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
