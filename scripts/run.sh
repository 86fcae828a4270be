#!/usr/bin/env bash
# The main job: install what is missing, build, and run `activekv run`: the default
# model (SmolLM2-135M) on the embedded default trace under configs/default.json.
# Extra arguments go to the command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target activekv -- -j"${JOBS:-2}"
exec build/release/src/cli/activekv run "$@"
