#!/usr/bin/env bash
# The sparse-attention quality table (docs/SPARSE.md "Quality"): `activekv eval` on the
# shipped text and the passkey test, exact against 1/2, 1/4, 1/8, 1/16 of the pages and
# adaptive, in one process each. Slow on 2 cores (an 8K prefill is minutes; the text half took
# 18 min and each 8K passkey depth 11-14 min on the loaded development VM): not part of
# the test suite, whose quick version is eval_model_test.
#   OUT            output folder (default out/eval)
#   CONTEXT        tokens per window and per passkey prompt (default 8192)
#   STRIDE         tokens scored per window (default 512; one window with MAX_WINDOWS=1)
#   MAX_WINDOWS    windows evaluated (default 1)
#   DEPTHS         passkey depths (default 0,0.25,0.5,0.75,1); TRIALS per depth (default 1)
#   DEVICE_POOL    device arena (default 1280MiB: every setting's context resident, nothing staged)
#   JOBS           build parallelism (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/eval}
CONTEXT=${CONTEXT:-8192}
DEVICE_POOL=${DEVICE_POOL:-1280MiB}
mkdir -p "$OUT"
cmake --preset release >/dev/null
cmake --build --preset release -- -j"${JOBS:-2}" activekv
B=build/release/src/cli/activekv
echo "== text: context $CONTEXT, stride ${STRIDE:-512}, ${MAX_WINDOWS:-1} window(s)"
time $B eval --text data/eval_text.txt --context "$CONTEXT" --stride "${STRIDE:-512}" --max-windows "${MAX_WINDOWS:-1}" \
  --device-pool "$DEVICE_POOL" --json > "$OUT/text.json"
echo "== passkey: context $CONTEXT, depths ${DEPTHS:-0,0.25,0.5,0.75,1}, ${TRIALS:-1} trial(s) each"
time $B eval --passkey --context "$CONTEXT" --depths "${DEPTHS:-0,0.25,0.5,0.75,1}" --trials "${TRIALS:-1}" \
  --device-pool "$DEVICE_POOL" --json > "$OUT/passkey.json"
echo "== results in $OUT (text.json, passkey.json)"
