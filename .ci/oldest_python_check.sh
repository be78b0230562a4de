#!/usr/bin/env bash
# The README's set-up and test command on the oldest Python that pyproject's requires-python allows (3.10, the
# Python of JetPack 6's Jetsons): scripts/setup.sh builds the environment with the dev extra there, as a user on
# that Python would, then the whole test suite runs in it. On 3.10 the dev extra leaves Flower out (flwr 1.40
# needs 3.11), so the Flower tests skip; everything else must pass. torch 2.13.0 is on this machine's disk for
# python3 (3.11) only: for 3.10 pip downloads that release's build from the index (about 3 GB).
#
# Where this machine has no Python at the floor (python3.X on PATH or pyenv's), it says so in one line and stops
# with exit 0: there is nothing to build it on.
#   EDGEPROF_OLDEST_VENV  where to build it (default .venv-oldest; rebuilt from scratch every run)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/pythons.sh
source .ci/pythons.sh
VENV="${EDGEPROF_OLDEST_VENV:-.venv-oldest}"
floor="$(python_floor)"
py="$(oldest_python)"
if [ -z "$py" ]; then
  echo "oldest: no Python $floor here (python$floor on PATH or pyenv's): not run" >&2
  exit 0
fi
rm -rf "$VENV"
echo "oldest: $("$py" -c 'import sys; print("Python", sys.version.split()[0])') ($py), the README's set-up there"
PYTHON="$py" EDGEPROF_VENV="$VENV" bash scripts/setup.sh
"$VENV/bin/python" -m pytest -q -p no:cacheprovider
