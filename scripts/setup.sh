#!/usr/bin/env bash
# One-step set-up on a fresh machine: a virtual environment in .venv with edgeprof and its test tools.
#
# torch is installed first, on purpose, so that pip never resolves a bare "torch" requirement to a
# multi-GB CUDA build:
#   - a torch that the environment can already import (JetPack's wheel on a Jetson, a CUDA build you
#     installed yourself; use EDGEPROF_VENV_ARGS=--system-site-packages to see a system-wide one) is kept;
#   - otherwise EDGEPROF_TORCH_SPEC (default torch==2.13.0) is installed, from EDGEPROF_TORCH_INDEX_URL when
#     set (point it at PyTorch's CPU-only wheel index on a CPU-only x86_64 machine whose pip would
#     otherwise fetch the CUDA build). The CI machine carries the CPU build of torch 2.13.0 locally.
# Then `pip install -e .[dev]`: pyproject's "torch>=2.1" is already satisfied, so nothing more is pulled.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${EDGEPROF_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EDGEPROF_EXTRAS:-dev}"

if [ ! -x "$VENV/bin/python" ]; then
  # shellcheck disable=SC2086
  "$PYTHON" -m venv ${EDGEPROF_VENV_ARGS:-} "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

if "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup: keeping the installed torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
else
  spec="${EDGEPROF_TORCH_SPEC:-torch==2.13.0}"
  echo "setup: installing $spec"
  if [ -n "${EDGEPROF_TORCH_INDEX_URL:-}" ]; then
    "${PIP[@]}" "$spec" --index-url "$EDGEPROF_TORCH_INDEX_URL"
  else
    "${PIP[@]}" "$spec"
  fi
fi
"${PIP[@]}" -e ".[$EXTRAS]"
echo "setup: done ($("$VENV/bin/python" -c 'import torch, onnxruntime; print("torch", torch.__version__, "| onnxruntime", onnxruntime.__version__)'))"
