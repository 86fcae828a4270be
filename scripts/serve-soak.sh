#!/usr/bin/env bash
# The serve soak: issue 24's mixed load against the real `activekv serve` (default model and
# configuration) for N minutes, with CPU hogs beside it to shake the timing.
#   scripts/serve-soak.sh --minutes 10 [--clients 8] [--seed 1] [--words-max 900] [--max-tokens 12]
#   HOGS   busy-looping processes beside the server (default: the number of cores)
#   JOBS   build parallelism (default 2)
# Prints what it sent, what came back (per outcome), every greedy text that differs from the
# same request sent alone, /metrics' counts against what was sent, and on an abort the
# server's exit status and last lines. Exits non-zero on an abort, a differing output, a count
# that does not match, allocations after warm-up, or a SIGTERM that does not end cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
HOGS=${HOGS:-$(nproc)}
cmake --preset release >/dev/null
cmake --build --preset release -- -j"$JOBS" activekv >/dev/null
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_hogs EXIT
for _ in $(seq 1 "$HOGS"); do
  (while :; do :; done) &
  hogs+=($!)
done
echo "serve-soak: $HOGS CPU hogs beside the server (pids ${hogs[*]})"
python3 src/server/serve_soak.py build/release/src/cli/activekv "$@"
