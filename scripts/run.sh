#!/usr/bin/env bash
# The main job: install what is missing, build, and run `activekv run`: the default
# model (SmolLM2-135M) on the embedded default trace under configs/default.json.
# Extra arguments go to the command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
echo "run.sh: building activekv (log: build/release/build-activekv.log)"
if ! cmake --build --preset release --target activekv -- -j"${JOBS:-2}" > build/release/build-activekv.log 2>&1; then
  tail -n 40 build/release/build-activekv.log
  exit 1
fi
exec build/release/src/cli/activekv run "$@"
