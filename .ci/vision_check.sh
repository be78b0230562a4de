#!/usr/bin/env bash
# The torchvision leg of CI: torchvision's edge models (mobilenet_v3_small, resnet18, efficientnet_b0) built from
# the real torchvision, in an environment of their own.
#
# The main .venv carries torch 2.13.0's CPU build, for which no torchvision imports here, so the backbone tests
# there run without torchvision (tests/test_vision_real.py is skipped, with the reason). This script builds
# .venv-vision with the `vision` extra (scripts/setup.sh then installs the torch/torchvision pair that imports:
# torch 2.14.1 + torchvision 0.29.1) and runs the backbone tests in it, real models included (about 2 minutes to
# build the environment, well under one to test, on the CI machine's 2 cores). It fails when
# torchvision does not import or when any real-model test is skipped (EDGEPROF_REQUIRE_TORCHVISION=1 turns the
# skip into an error), so it never passes without having run them.
#
#   bash .ci/vision_check.sh                # EDGEPROF_VISION_VENV=path to build the environment elsewhere
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${EDGEPROF_VISION_VENV:-.venv-vision}"

start=$SECONDS
EDGEPROF_VENV="$VENV" EDGEPROF_EXTRAS=dev,vision bash scripts/setup.sh
built=$SECONDS
"$VENV/bin/python" -c 'import torch, torchvision
print("vision check: torch", torch.__version__, "| torchvision", torchvision.__version__)'

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
EDGEPROF_REQUIRE_TORCHVISION=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider -rs \
  tests/test_vision_real.py tests/test_backbones.py tests/test_custom_backbone.py 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
echo "vision check: environment $((built - start)) s, tests $((SECONDS - built)) s"
if [ "$status" -ne 0 ]; then
  echo "vision check: pytest exited with $status" >&2
  exit "$status"
fi
if grep -q '^SKIPPED .*tests/test_vision_real.py' "$log"; then
  echo "vision check: real torchvision tests were skipped in $VENV" >&2
  exit 1
fi
