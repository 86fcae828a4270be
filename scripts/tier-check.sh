#!/usr/bin/env bash
# The long checks of the shared KV tier (docs/TIER.md), kept out of the default suite for time:
#   1. serve_tier_test.py --long   two servers and one Redis with 256-token blocks and ~600-token
#                                  prompts: follow-up restored and bit-identical; every fault
#   2. tier_load_test.py --long    12 conversations × 4 turns, 4 at once, moving between the two
#                                  servers: 0 lost, 0 wrong outputs
# The quick versions of both run in the suite (ctest -L tier). About 3–4 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -- -j"${JOBS:-2}" activekv
bin=build/release/src/cli/activekv
python3 src/tier/serve_tier_test.py "$bin" --long
python3 src/tier/tier_load_test.py "$bin" --long
echo "tier-check: all passed"
