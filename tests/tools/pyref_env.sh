#!/usr/bin/env bash
# Source this before running the Python reference tools with a PyPI torch
# (a CUDA build) on a machine whose CUDA install lacks some of the libraries
# that torch links (libcufile, libcusparseLt, libnvshmem_host, a newer NCCL).
# It fetches those few wheels from PyPI once into $PDSERVE_CACHE/nvlibs and
# puts them on LD_LIBRARY_PATH; torch then imports and runs on the CPU.
#   . tests/tools/pyref_env.sh && /opt/pyref/venv/bin/python tests/tools/...
PY="${PYREF_PYTHON:-/opt/pyref/venv/bin/python}"
if "$PY" -c 'import torch' >/dev/null 2>&1; then return 0 2>/dev/null || exit 0; fi
NV="${PDSERVE_CACHE:-$HOME/.cache/pdserve}/nvlibs/pkgs/nvidia"
if [ ! -d "$NV/nccl/lib" ]; then
  tmp="$(mktemp -d)"
  mkdir -p "$(dirname "$NV")"
  "$PY" -m pip download --no-deps -q -d "$tmp" nvidia-cusparselt-cu13==0.8.1 \
    nvidia-nvshmem-cu13==3.7.2 nvidia-cufile nvidia-nccl-cu13==2.30.7
  for w in "$tmp"/*.whl; do unzip -q -o "$w" -d "$(dirname "$NV")"; done
  rm -rf "$tmp"
fi
export LD_LIBRARY_PATH="$NV/cusparselt/lib:$NV/cu13/lib:$NV/nvshmem/lib:$NV/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
