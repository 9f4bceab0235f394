#!/usr/bin/env bash
# The main job on the embedded default (Gemma 3 270M + the local data in ../shared/data):
# set up, then train -> evaluate -> report. Extra arguments go to `medqa quickstart`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec medqa quickstart "$@"
