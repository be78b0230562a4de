# Sourced by the scripts that install torch first (scripts/setup.sh, .ci/plain_install_check.sh): where torch
# comes from.
# torch_index prints pip's index options for torch, one per line, using $PYTHON to ask an index:
#   - EDGEPROF_TORCH_INDEX_URL, when set, as the only index;
#   - else, on an x86_64 Linux machine with no NVIDIA driver, where PyPI's torch is the CUDA build, PyTorch's
#     CPU-only index (EDGEPROF_TORCH_CPU_INDEX, default https://download.pytorch.org/whl/cpu) as an extra one when
#     it answers, so pip takes the "+cpu" build of the same release; when it does not answer, a line on stderr
#     says so and nothing is printed;
#   - else nothing: pip's own indexes.
CPU_INDEX="${EDGEPROF_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

no_nvidia_x86_linux() {  # where PyPI's torch is the CUDA build and nothing here could use it
  [ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ] && ! command -v nvidia-smi >/dev/null 2>&1 &&
    [ ! -e /proc/driver/nvidia/version ]
}

answers() {  # the index serves a torch page within 10 seconds
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10).close()' \
    "${1%/}/torch/" >/dev/null 2>&1
}

torch_index() {  # the index options for torch's install, one per line
  if [ -n "${EDGEPROF_TORCH_INDEX_URL:-}" ]; then
    printf '%s\n' --index-url "$EDGEPROF_TORCH_INDEX_URL"
  elif no_nvidia_x86_linux; then
    if answers "$CPU_INDEX"; then
      echo "setup: no NVIDIA GPU here: torch's CPU-only build, from $CPU_INDEX" >&2
      printf '%s\n' --extra-index-url "$CPU_INDEX"
    else
      echo "setup: note: no NVIDIA GPU here, and $CPU_INDEX does not answer: pip takes torch from its own" \
        "indexes, whose Linux build may be the CUDA one (about 3 GB); EDGEPROF_TORCH_INDEX_URL names another" >&2
    fi
  fi
}
