#!/usr/bin/env bash
# The main job: install what is missing, build, and run ActiveKV's default job.
# Extra arguments go to the command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target activekv -- -j"${JOBS:-2}"
exec build/release/activekv plan --preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --max-seqs 32 "$@"
