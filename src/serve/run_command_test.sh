#!/usr/bin/env bash
# run_command_test.sh — `activekv run` from the outside: exit codes, messages, files.
# Uses the deterministic fake engine (no model file), so it runs in a second.
#   run_command_test.sh path/to/activekv
set -u
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The default trace and configuration: plan first, lowered concurrency, summary, report files.
"$bin" run --engine fake --arrival-scale 0 --report "$dir/report" > "$dir/out.txt" 2> "$dir/err.txt" || fail "default fake run exited $?: $(cat "$dir/err.txt")"
head -1 "$dir/out.txt" | grep -q "fake engine" || fail "the plan is not printed first"
grep -q "trace: 10 requests" "$dir/out.txt" || fail "the default trace was not loaded"
grep -q "requests 10/10 done" "$dir/out.txt" || fail "not every request ended"
grep -q "allocations after warm-up: device 0, heap 0" "$dir/out.txt" || fail "allocations after warm-up"
[[ -s "$dir/report/report.json" && -s "$dir/report/report.html" ]] || fail "report files missing"

# Prefix reuse: on by default for the default trace's sessions, off with --no-prefix-reuse; same outputs.
grep -q "^reuse      on: " "$dir/out.txt" || fail "the summary has no prefix reuse line"
"$bin" run --engine fake --arrival-scale 0 --no-prefix-reuse --report "$dir/off" > "$dir/off.txt" 2>&1 || fail "--no-prefix-reuse run exited $?"
grep -q "^reuse      off (--no-prefix-reuse): 0 prompt tokens reused" "$dir/off.txt" || fail "--no-prefix-reuse did not turn reuse off: $(cat "$dir/off.txt")"
python3 - "$dir/report/report.json" "$dir/off/report.json" <<'PY' || fail "outputs differ with and without prefix reuse, or nothing was reused"
import json, sys
on, off = (json.load(open(p)) for p in sys.argv[1:3])
assert [r.get("output_text") for r in on["request_list"]] == [r.get("output_text") for r in off["request_list"]]
assert on["prefix_reuse"]["reused_tokens"] > 0 and off["prefix_reuse"]["reused_tokens"] == 0
assert on["tokens"]["in"] < off["tokens"]["in"]
PY

# A malformed trace line: exit 2, the error names the file, the line and the field.
printf '{"arrival_s": 0, "prompt": "ok", "max_tokens": 2}\n\n{"arrival_s": 1, "prompt": "x", "max_tokens": "many"}\n' > "$dir/bad.jsonl"
"$bin" run --engine fake --trace "$dir/bad.jsonl" > /dev/null 2> "$dir/err.txt"
code=$?
[[ $code -eq 2 ]] || fail "malformed trace exited $code, expected 2"
grep -q "bad.jsonl:3: field \"max_tokens\"" "$dir/err.txt" || fail "error does not name line and field: $(cat "$dir/err.txt")"

# A request longer than max context is rejected with its reason while the others run.
printf '{"arrival_s": 0, "prompt": "short one", "max_tokens": 4}\n{"arrival_s": 0, "prompt_tokens": [1, 2], "max_tokens": 9000}\n{"arrival_s": 0, "prompt": "another", "max_tokens": 4}\n' > "$dir/long.jsonl"
"$bin" run --engine fake --trace "$dir/long.jsonl" --report "$dir/long" > "$dir/out.txt" 2>&1 || fail "too-long trace exited $?"
grep -q "2 finished, 0 cancelled, 1 rejected of 3" "$dir/out.txt" || fail "too-long request not rejected alone: $(cat "$dir/out.txt")"
grep -q '"reject_reason": "longer_than_max_context"' "$dir/long/report.json" || fail "reject reason missing from report.json"

# An automatic device pool is refused with the reason.
"$bin" run --engine fake --device-pool auto > /dev/null 2> "$dir/err.txt"
code=$?
[[ $code -eq 2 ]] || fail "--device-pool auto exited $code, expected 2"
grep -q "automatic device pool size is refused" "$dir/err.txt" || fail "auto refusal does not say why"
for automatic in 0 50% max; do
  code=0
  "$bin" run --engine fake --device-pool "$automatic" > /dev/null 2> "$dir/err.txt" || code=$?
  [[ $code -eq 2 ]] || fail "--device-pool $automatic exited $code, expected 2"
  grep -q "automatic device pool size is refused" "$dir/err.txt" || fail "--device-pool $automatic refusal does not say why"
done
echo "run_command_test: ok"
