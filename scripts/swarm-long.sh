#!/usr/bin/env bash
# The long reliability run: a long swarm and longer fuzzing.
#   SWARM_SEEDS    seeds (default 100000), from SWARM_FIRST_SEED (default 1)
#   FUZZ_SECONDS   seconds per fuzzer (default 600)
#   JOBS           build parallelism (default 2)
# The swarm's summary is printed at the end; a failing seed stops the run with
# its replay command (build/release/src/cli/activekv swarm --seed N).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
cmake --preset release >/dev/null
cmake --build --preset release -- -j"$JOBS" activekv
echo "== swarm: ${SWARM_SEEDS:-100000} seeds"
time build/release/src/cli/activekv swarm --seeds "${SWARM_SEEDS:-100000}" --first-seed "${SWARM_FIRST_SEED:-1}"
echo "== fuzzers: ${FUZZ_SECONDS:-600}s each"
FUZZ_SECONDS=${FUZZ_SECONDS:-600} JOBS=$JOBS scripts/fuzz-quick.sh
