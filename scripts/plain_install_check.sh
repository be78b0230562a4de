#!/usr/bin/env bash
# A plain install, as a new user makes it: a fresh virtual environment, torch first (as scripts/setup.sh does,
# so that pip never resolves a bare "torch" to a multi-GB CUDA build), then `pip install .` with no extras, so
# the resolver takes the newest typer, rich, pydantic, ... that pyproject's bounds allow. Then
# tests/test_plain_env.py runs that environment's `edgeprof` script from outside the checkout: --help of every
# command, algos, doctor, the README's main job and its summary, a small sweep, and a dashboard that must say in
# one line that plotly is missing.
#
# Needs the main environment (.venv, scripts/setup.sh) for pytest. Fails when typer is not the newest release
# the package index offers (the point of this check), unless EDGEPROF_PLAIN_ANY_TYPER=1.
#   EDGEPROF_PLAIN_VENV  where to build it (default .venv-plain; rebuilt from scratch every run)
#   EDGEPROF_TORCH_SPEC  the torch installed first (default torch==2.13.0)
set -euo pipefail
cd "$(dirname "$0")/.."
PLAIN="${EDGEPROF_PLAIN_VENV:-.venv-plain}"
PYTHON="${PYTHON:-python3}"
rm -rf "$PLAIN"
"$PYTHON" -m venv "$PLAIN"
PIP=("$PLAIN/bin/python" -m pip install --quiet --disable-pip-version-check)
spec="${EDGEPROF_TORCH_SPEC:-torch==2.13.0}"
echo "plain: installing $spec, then 'pip install .' (no extras)"
# shellcheck disable=SC2086
if [ -n "${EDGEPROF_TORCH_INDEX_URL:-}" ]; then
  "${PIP[@]}" $spec --index-url "$EDGEPROF_TORCH_INDEX_URL"
else
  "${PIP[@]}" $spec
fi
"${PIP[@]}" .
installed="$("$PLAIN/bin/python" -c 'from importlib.metadata import version; print(version("typer"))')"
newest="$("$PLAIN/bin/python" -m pip index versions typer 2>/dev/null | sed -n 's/^typer (\(.*\))$/\1/p' || true)"
echo "plain: typer $installed installed; newest on the index: ${newest:-unknown}"
if [ "${EDGEPROF_PLAIN_ANY_TYPER:-0}" != 1 ] && [ -n "$newest" ] && [ "$installed" != "$newest" ]; then
  echo "plain: error: the plain install took typer $installed, not the newest ($newest): a bound in pyproject.toml holds it back" >&2
  exit 1
fi
EDGEPROF_PLAIN_VENV="$(cd "$PLAIN" && pwd)" EDGEPROF_REQUIRE_PLAIN=1 \
  .venv/bin/python -m pytest -q -p no:cacheprovider -s tests/test_plain_env.py
