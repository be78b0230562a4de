#!/usr/bin/env bash
# One-step set-up on a fresh machine: a virtual environment in .venv with edgeprof and its test tools.
#
# torch is installed first, on purpose, so that pip never resolves a bare "torch" requirement to a
# multi-GB CUDA build:
#   - a torch that the environment can already import (JetPack's wheel on a Jetson, a CUDA build you
#     installed yourself; use EDGEPROF_VENV_ARGS=--system-site-packages to see a system-wide one) is kept;
#   - otherwise EDGEPROF_TORCH_SPEC is installed, from EDGEPROF_TORCH_INDEX_URL when set. Without it, on an
#     x86_64 Linux machine with no NVIDIA driver (no nvidia-smi, no /proc/driver/nvidia), where PyPI's torch is
#     the CUDA build (about 3 GB with its libraries), PyTorch's CPU-only index (EDGEPROF_TORCH_CPU_INDEX,
#     default https://download.pytorch.org/whl/cpu) is added when it answers: pip then takes the smaller
#     "+cpu" build of the same release; when it does not answer, one line says so and pip uses its own
#     indexes. The spec's default is torch==2.13.0 (the CI machine carries its CPU build locally), or, when
#     EDGEPROF_EXTRAS names `vision`, "torch==2.14.1 torchvision==0.29.1": a torchvision wheel pins one torch,
#     and this is the pair the CI machine can import (its torch is a CUDA build, ~5.5 GB, that also runs on a
#     CPU; the torchvision 0.28 wheel for torch 2.13 links torch's CUDA libraries, which the CPU build lacks).
# Then `pip install -e .[$EDGEPROF_EXTRAS]` (default `dev`; e.g. `dev,vision`): pyproject's "torch>=2.1" (and
# "torchvision>=0.16") are already satisfied, so nothing more is pulled.
#
#   bash scripts/setup.sh                                                  # .venv, extras dev
#   bash scripts/setup.sh --dry-run                                        # print what it would run, run nothing
#   EDGEPROF_VENV=.venv-vision EDGEPROF_EXTRAS=dev,vision bash scripts/setup.sh   # torchvision's models too
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${EDGEPROF_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EDGEPROF_EXTRAS:-dev}"
case "${1:-}" in
  "") DRY_RUN=0 ;;
  --dry-run) DRY_RUN=1 ;;
  *) echo "setup: error: unknown argument '$1' (the only one is --dry-run)" >&2; exit 2 ;;
esac

run() {  # run a command, or with --dry-run print it
  if [ "$DRY_RUN" = 1 ]; then echo "+ $*"; else "$@"; fi
}
# shellcheck source=scripts/torch_index.sh
source scripts/torch_index.sh

if [ ! -x "$VENV/bin/python" ]; then
  # shellcheck disable=SC2086
  run "$PYTHON" -m venv ${EDGEPROF_VENV_ARGS:-} "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

if "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "setup: keeping the installed torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
else
  case ",$EXTRAS," in
    *,vision,*) default_spec="torch==2.14.1 torchvision==0.29.1" ;;
    *) default_spec="torch==2.13.0" ;;
  esac
  spec="${EDGEPROF_TORCH_SPEC:-$default_spec}"
  echo "setup: installing $spec"
  read -r -a specs <<<"$spec"
  index=()
  while IFS= read -r option; do index+=("$option"); done < <(torch_index)  # bash 3.2 (macOS) has no mapfile
  run "${PIP[@]}" "${specs[@]}" ${index[@]+"${index[@]}"}
fi
run "${PIP[@]}" -e ".[$EXTRAS]"
if [ "$DRY_RUN" = 0 ]; then
  echo "setup: done ($("$VENV/bin/python" -c 'import torch, onnxruntime; print("torch", torch.__version__, "| onnxruntime", onnxruntime.__version__)'))"
fi
