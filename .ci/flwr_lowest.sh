#!/usr/bin/env bash
# CI leg: `edgeprof flower-simulate` on the lowest flwr pyproject allows (the bound of the `flower` extra). That flwr
# is installed into a folder of its own (.venv keeps its newer one, and gives the rest: --no-deps), put first on
# PYTHONPATH, which every process of Flower's runtime inherits (the SuperLink, its SuperExec, the simulation process
# and Ray's workers), and its scripts first on PATH; then tests/test_flower_simulation.py runs against it. A few
# minutes. Needs .venv with the dev extra (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bound=$(sed -n 's/^flower = \["flwr\[simulation\]>=\([0-9.]*\)"\].*$/\1/p' pyproject.toml)
if [ -z "$bound" ]; then
  echo "flwr_lowest: no flwr bound in the flower extra of pyproject.toml" >&2
  exit 1
fi
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
.venv/bin/python -m pip install -q --no-deps --target "$target" "flwr==$bound"
export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" PATH="$target/bin:$PATH"
# the flwr the tests import is the bound's, from the folder, not .venv's
.venv/bin/python - "$target" "$bound" <<'PY'
import sys
from importlib.metadata import version
from pathlib import Path

import flwr

target, bound = Path(sys.argv[1]), sys.argv[2]
assert Path(flwr.__file__).is_relative_to(target), flwr.__file__
assert version("flwr").split(".")[:2] == bound.split(".")[:2], version("flwr")
print(f"flwr_lowest: flwr {version('flwr')} from {target}")
PY
.venv/bin/python -m pytest -q -p no:cacheprovider tests/test_flower_simulation.py
