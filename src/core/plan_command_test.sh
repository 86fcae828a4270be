#!/usr/bin/env bash
# plan_command_test.sh — `activekv plan` end to end: the formula printed with its numbers, the JSON
# keys named after the formula's terms, and every refusal exiting 2 with the setting on stderr.
# Usage: plan_command_test.sh path/to/activekv
set -uo pipefail
bin=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

expect_ok() {  # expect_ok "needle" args...
  local needle=$1; shift
  local out; out=$("$bin" plan "$@" 2>&1); local rc=$?
  [[ $rc -eq 0 ]] || fail "exit $rc for: $* ($out)"
  [[ $out == *"$needle"* ]] || fail "no '$needle' in output of: $*"
}
expect_refused() {  # expect_refused "setting" args...
  local setting=$1; shift
  local err; err=$("$bin" plan "$@" 2>&1 >/dev/null); local rc=$?
  [[ $rc -eq 2 ]] || fail "exit $rc (want 2) for: $*"
  [[ $err == *"$setting"* ]] || fail "stderr does not name $setting for: $* ($err)"
}

seed=(--preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --max-seqs 32)
expect_ok "segment_bytes     = max_context 32768 × row_bytes 4096 = 128 MiB" "${seed[@]}"
expect_ok "histories         = floor(segments 512 / dense_layers 16) = 32   (2 GiB each)" "${seed[@]}"
expect_ok "concurrency       = min(max_seqs 64, histories 32) = 32   (lowered" --preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --max-seqs 64
expect_ok "recurrent slots" "${seed[@]}"
expect_ok "floor       288 pages" "${seed[@]}"
# With prefix reuse, each history also keeps its recurrent-state checkpoints: 27 histories, K in the formula.
expect_ok "histories         = min(floor(segments 512 / dense_layers 16), floor((host_pool 64 GiB − prefix_cache 0 B) / (history 2 GiB + state checkpoints 293.62 MiB))) = 27" \
  "${seed[@]}" --state-checkpoint-pages 0
expect_ok "checkpoints       = newest 1 + prompt 1 + every K pages floor(max_context 32768 / (K 512 × page_tokens 16)) = 6" \
  "${seed[@]}" --state-checkpoint-pages 512
expect_ok "recurrent slots   = concurrency 26 × 146.81 MiB" "${seed[@]}" --state-checkpoint-pages 2048
expect_refused "--state-checkpoint-pages" "${seed[@]}" --state-checkpoint-pages many
# The same geometry given field by field; sizes in plain bytes.
expect_ok "segment_bytes     = max_context 32768 × row_bytes 4096 = 128 MiB" \
  --dense-layers 16 --kv-heads 4 --head-dim 256 --dtype bf16 --recurrent-layers 48 --recurrent-state-bytes 147MiB \
  --max-context 32768 --host-pool 68719476736 --device-pool 16GiB --max-seqs 32

# Window layers (DESIGN.md "Layer kinds"): Gemma 3 270M at 32K costs a window per local layer.
gemma=(--preset gemma3-270m --host-pool 4GiB --device-pool 1GiB --max-seqs 64)
expect_ok "layer kinds: 3 full layers, 15 window layers of 512 tokens" "${gemma[@]}"
expect_ok "history (rings)   = full 3 × segment 32 MiB + window 15 × ring 528 KiB = 103.73 MiB" "${gemma[@]}"
expect_ok "histories         = floor(4 GiB / history) = 39 with rings, 7 with full layers" "${gemma[@]}"
expect_ok "layer kinds: 10 full layers, 52 window layers of 1024 tokens" --preset gemma3-27b --host-pool 64GiB --device-pool 16GiB
expect_refused "/nonexistent/model.gguf: cannot open" --model /nonexistent/model.gguf --host-pool 4GiB --device-pool 1GiB
expect_refused "--model" --model /nonexistent/model.gguf --preset gemma3-1b --host-pool 4GiB --device-pool 1GiB
# A model file's metadata gives the geometry (the Gemma 3 file where it is installed).
gemma_file=$(bash "$(dirname "$0")/../../scripts/find-gemma3.sh" 2>/dev/null) || gemma_file=""
if [[ -n $gemma_file && -f $gemma_file ]]; then
  expect_ok "history (rings)   = full 3 × segment 32 MiB + window 15 × ring 528 KiB = 103.73 MiB" \
    --model "$gemma_file" --host-pool 4GiB --device-pool 1GiB
else
  echo "skip: the Gemma 3 270M file is not installed (scripts/find-gemma3.sh)"
fi

json=$("$bin" plan "${seed[@]}" --json) || fail "--json exit $?"
python3 - "$json" <<'PY' || fail "JSON figures"
import json, sys
j = json.loads(sys.argv[1])
h = j["host_pool"]
assert h["segment_bytes"] == 128 << 20, h
assert h["segments"] == 512 and h["histories"] == 32 and h["leftover_segments"] == 0 and h["concurrency"] == 32, h
a = j["arena"]
for part in ("staging_tiles", "page_pool", "recurrent", "headroom"):
    assert {"offset_bytes", "size_bytes"} <= a[part].keys(), part
assert a["page_pool"]["offset_bytes"] >= a["staging_tiles"]["size_bytes"]
assert a["used_bytes"] + a["unused_bytes"] == a["device_pool_bytes"] == 16 << 30
b = j["budget"]
assert b["floor_pages"] <= b["target_pages"] <= b["burst_pages"], b
PY

expect_refused "--device-pool" --preset hybrid-27b --host-pool 64GiB --device-pool auto
expect_refused "--device-pool" --preset hybrid-27b --host-pool 64GiB --device-pool 0
expect_refused "--device-pool" --preset hybrid-27b --host-pool 64GiB --device-pool 50%
expect_refused "--device-pool" --preset hybrid-27b --host-pool 64GiB
expect_refused "--device-pool" --preset hybrid-27b --host-pool 64GiB --device-pool 300MiB
expect_refused "host pool must be at least 2 GiB (16 segments of 128 MiB) for max context 32768" --preset hybrid-27b --host-pool 1GiB --device-pool 16GiB
expect_refused "--tile-tokens" --preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --page-tokens 16 --tile-tokens 1000
# --retained-histories: the run configuration's bound (1,024), named in the refusal; 1,024 itself is planned.
expect_refused "--retained-histories: must be a whole number from 0 to 1024, got 1025" --preset smollm2-135m --host-pool 1TiB --device-pool 1GiB --retained-histories 1025
expect_refused "--retained-histories: must be a whole number from 0 to 1024, got 99999999999" --preset smollm2-135m --host-pool 1TiB --device-pool 1GiB --retained-histories 99999999999
expect_ok "retained_histories 1024" --preset smollm2-135m --host-pool 1TiB --device-pool 1GiB --retained-histories 1024
expect_refused "--target-pages" --preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --floor-pages 600 --target-pages 500
expect_refused "--burst-pages" --preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --target-pages 600 --burst-pages 500
expect_refused "--floor-pages" --preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --floor-pages 10
expect_refused "--max-context" --preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --max-context 32769
expect_refused "--host-pool" --preset hybrid-27b --host-pool -1 --device-pool 16GiB
expect_refused "--host-pool" --preset hybrid-27b --host-pool 12XB --device-pool 16GiB
expect_refused "--host-pool" --preset hybrid-27b --host-pool 99999999999999999999 --device-pool 16GiB
expect_refused "--host-pool" --preset hybrid-27b --host-pool 0 --device-pool 16GiB
expect_refused "--max-seqs" --preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --max-seqs 0
expect_refused "--max-seqs" --preset hybrid-27b --host-pool 64GiB --device-pool 16GiB --max-seqs 4k
expect_refused "--preset" --host-pool 64GiB --device-pool 16GiB
expect_refused "--preset" --preset gpt-5 --host-pool 64GiB --device-pool 16GiB
expect_refused "--kv-heads" --dense-layers 16 --head-dim 64 --max-context 4096 --host-pool 64GiB --device-pool 16GiB
expect_refused "--dtype" --preset hybrid-27b --dtype int3 --host-pool 64GiB --device-pool 16GiB

if [[ $failures -ne 0 ]]; then echo "$failures failure(s)"; exit 1; fi
echo "activekv plan: all end-to-end checks passed"
