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
python -m pip install -q -e ".[embedded,serve,rag,dev,bench,qdrant]"
# The UI browser test drives Debian's Chromium (never a downloaded browser build).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 || echo "warning: could not install chromium; the browser test will fail" >&2
fi
# A real llama.cpp OpenAI-compatible server for the remote-backend test. It compiles from source on a
# machine without a cached wheel (~15-25 min on 2 cores), so a failure here is reported, not fatal:
# the test then fails with the reason instead of the whole setup.
if ! python -c "import llama_cpp.server" 2>/dev/null; then
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}" \
    python -m pip install -q -e ".[llamacpp]" || echo "warning: llama-cpp-python did not install" >&2
fi
