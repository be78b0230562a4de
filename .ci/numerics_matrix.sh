#!/usr/bin/env bash
# Run the numerics tests under each of torch's CPU kernel families this CPU can execute:
# ATEN_CPU_CAPABILITY=default and avx2 everywhere (x86_64), avx512 where the CPU has AVX-512.
# Usage: bash .ci/numerics_matrix.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
FILES=(tests/test_pflego.py tests/test_pflego_engines.py tests/test_ort.py tests/test_fedavg.py
       tests/test_baselines.py tests/test_head.py tests/test_aggregation.py tests/test_execution.py
       tests/test_flower_algorithms.py tests/test_reproducibility.py
       "tests/test_flower_e2e.py::test_pflego_on_flower_matches_the_in_process_run"
       "tests/test_flower_simulation.py::test_simulation_matches_in_process_and_notes_attribution")
caps=(default)
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then caps+=(avx2); fi
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then caps+=(avx512); fi
for cap in "${caps[@]}"; do
  echo "numerics: ATEN_CPU_CAPABILITY=$cap"
  ATEN_CPU_CAPABILITY="$cap" "$PY" -m pytest -q -p no:cacheprovider "${FILES[@]}" "$@"
done
