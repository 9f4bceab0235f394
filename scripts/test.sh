#!/usr/bin/env bash
# Set up, then run the whole test suite (unit tests on tiny models + integration tests on the real
# embedded Gemma 270M and ../shared/data). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TOKENIZERS_PARALLELISM=false
set +e
python -m pytest -q -rs "$@"
rc=$?
set -e
# pytest exit 5 = no tests collected: that is a failure of the suite, not a pass.
if [ "$rc" -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi
exit "$rc"
