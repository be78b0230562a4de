#!/usr/bin/env bash
# A plain install, as a new user makes it: a fresh virtual environment, torch first (as scripts/setup.sh does,
# so that pip never resolves a bare "torch" to a multi-GB CUDA build), then `pip install .` with no extras, so
# the resolver takes the newest typer, rich, pydantic, numpy, scipy, ... that pyproject's bounds allow, on the
# newest Python this machine has (today's numpy and scipy need a recent Python: on an older one pip quietly takes
# older releases). Then tests/test_plain_env.py runs that environment's `edgeprof` script from outside the
# checkout: --help of every command, algos, doctor, the README's main job and its summary, a small sweep, and
# dashboard / flower-simulate, which must say in one line which extra is missing; then the core test files (CLI,
# numerics, algorithms, compute, reports, profiler, sweep) on that environment.
#
# With --lowest, the same on the lowest releases pyproject declares instead of the newest (uv's
# --resolution lowest-direct: the oldest release of each dependency that its lower bound allows; torch is the one
# installed first, 2.1.2 by default), on the oldest Python that pyproject's requires-python allows: the lower
# bounds are what was run, not a guess.
#
# A Python is looked for as python3.X on PATH and among pyenv's versions; where the one wanted is not there, the
# check says so and uses python3. torch==2.13.0 is on this machine's disk for its python3 (3.11) only: on another
# Python pip downloads that release's build from the index (a CUDA build, about 3 GB, which runs on the CPU).
#
# Needs the main environment (.venv, scripts/setup.sh) for pytest. Without --lowest it fails when typer is not the
# newest release the package index offers (the point of this check), unless EDGEPROF_PLAIN_ANY_TYPER=1.
#   EDGEPROF_PLAIN_VENV  where to build it (default .venv-plain, or .venv-lowest; rebuilt from scratch every run)
#   EDGEPROF_TORCH_SPEC  the torch installed first (default torch==2.13.0; with --lowest torch==2.1.2)
#   PYTHON               the Python the environment is built with (default: the newest one here; with --lowest
#                        the oldest one requires-python allows)
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-newest}"
case "$MODE" in newest) DEFAULT_VENV=.venv-plain ;; --lowest) MODE=lowest; DEFAULT_VENV=.venv-lowest ;;
  *) echo "usage: $0 [--lowest]" >&2; exit 2 ;; esac
PLAIN="${EDGEPROF_PLAIN_VENV:-$DEFAULT_VENV}"
# shellcheck source=.ci/pythons.sh
source .ci/pythons.sh
if [ -z "${PYTHON:-}" ]; then
  if [ "$MODE" = lowest ]; then
    want="$(python_floor)"
    PYTHON="$(oldest_python)"
  else
    want="the newest"
    PYTHON="$(newest_python)"
  fi
  [ -n "$PYTHON" ] || echo "plain ($MODE): no Python $want found here; using python3" >&2
fi
PYTHON="${PYTHON:-python3}"
rm -rf "$PLAIN"
"$PYTHON" -m venv "$PLAIN"
PIP=("$PLAIN/bin/python" -m pip install --quiet --disable-pip-version-check)
# the lowest torch pyproject allows is torch 2.1: the release a plain index offers (its CUDA build, ~3 GB with the
# NVIDIA libraries it pulls, runs on the CPU)
if [ "$MODE" = lowest ]; then default_torch="torch==2.1.2"; else default_torch="torch==2.13.0"; fi
spec="${EDGEPROF_TORCH_SPEC:-$default_torch}"
python_now="$("$PLAIN/bin/python" -c 'import sys; print("Python", sys.version.split()[0])')"
echo "plain ($MODE): $python_now, installing $spec, then the project with no extras"
# shellcheck source=scripts/torch_index.sh
source scripts/torch_index.sh
index=()
while IFS= read -r option; do index+=("$option"); done < <(torch_index)
# shellcheck disable=SC2086
"${PIP[@]}" $spec ${index[@]+"${index[@]}"}
rm -rf build  # setuptools builds in the tree and never deletes a module removed since: no stale copy may ship
if [ "$MODE" = newest ]; then
  "${PIP[@]}" .
else
  "${PIP[@]}" uv
  torch_now="$("$PLAIN/bin/python" -c 'from importlib.metadata import version; print(version("torch").split("+")[0])')"
  echo "torch==$torch_now" > "$PLAIN/hold-torch.txt"
  links=()
  [ -n "${PIP_FIND_LINKS:-}" ] && links=(--find-links "$PIP_FIND_LINKS")
  "$PLAIN/bin/uv" pip install --quiet --python "$PLAIN/bin/python" --resolution lowest-direct \
    --override "$PLAIN/hold-torch.txt" "${links[@]}" .
  "$PLAIN/bin/uv" pip uninstall --quiet --python "$PLAIN/bin/python" uv
fi
"$PLAIN/bin/python" -c 'from importlib.metadata import version as v
print("plain:", ", ".join(f"{n} {v(n)}" for n in ("typer", "rich", "pydantic", "numpy", "scipy", "scikit-learn",
      "onnx", "onnxruntime", "codecarbon", "psutil", "pillow", "threadpoolctl", "nvidia-ml-py", "torch")))'
if [ "$MODE" = newest ]; then
  installed="$("$PLAIN/bin/python" -c 'from importlib.metadata import version; print(version("typer"))')"
  newest="$("$PLAIN/bin/python" -m pip index versions typer 2>/dev/null | sed -n 's/^typer (\(.*\))$/\1/p' || true)"
  echo "plain: typer $installed installed; newest on the index: ${newest:-unknown}"
  if [ "${EDGEPROF_PLAIN_ANY_TYPER:-0}" != 1 ] && [ -n "$newest" ] && [ "$installed" != "$newest" ]; then
    echo "plain: error: the plain install took typer $installed, not the newest ($newest): a bound in pyproject.toml holds it back" >&2
    exit 1
  fi
fi
EDGEPROF_PLAIN_VENV="$(cd "$PLAIN" && pwd)" EDGEPROF_REQUIRE_PLAIN=1 \
  .venv/bin/python -m pytest -q -p no:cacheprovider -s tests/test_plain_env.py
# the core tests on these releases: pytest joins the environment now that the plain checks are done
"${PIP[@]}" pytest pytest-timeout hypothesis
PYTHONPATH=. "$PLAIN/bin/python" -m pytest -q -p no:cacheprovider tests/test_cli.py tests/test_hostile_input.py \
  tests/test_pflego.py tests/test_ort.py tests/test_head.py tests/test_fedavg.py tests/test_baselines.py \
  tests/test_report.py tests/test_profiler.py tests/test_analysis.py tests/test_meters_carbon.py \
  tests/test_compute.py tests/test_custom_backbone.py tests/test_execution.py tests/test_pflego_engines.py \
  tests/test_reproducibility.py tests/test_backbones.py tests/test_eval_protocol.py tests/test_sweep.py \
  tests/test_train.py
