#!/usr/bin/env bash
# Create .venv and install medqa with everything the demo and tests need.
# torch is installed FIRST and pinned, so pip never pulls a multi-GB CUDA build on a CPU machine.
# On a GPU machine, set TORCH_SPEC / TORCH_INDEX_URL (README: Install) before running this.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
if ! python -c "import torch" 2>/dev/null; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    python -m pip install -q "${TORCH_SPEC:-torch}" --index-url "$TORCH_INDEX_URL"
  else
    python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
  fi
fi
python -m pip install -q -e ".[embedded,serve,rag,dev,bench]"
