#!/usr/bin/env bash
# gemma3-long.sh — one 32K prompt prefilled and decoded on the Gemma 3 270M file
# (scripts/find-gemma3.sh) under configs/gemma3.json: explicit pools sized with the window formula,
# a device arena smaller than one context, history streaming through the staging tiles.
#
#   scripts/gemma3-long.sh [--tokens 32704] [--max-tokens 64] [--config configs/gemma3.json]
#                          [--build-dir build/release]
#
# The prompt: BOS (the file's) and then data/eval_text.txt's ids (activekv_tokenize, the text
# repeated as often as needed), cut to --tokens in all; 32,704 + 64 generated tokens end at the
# model's 32,768. It runs as a one-request trace through `activekv run --config … --report DIR`
# under /usr/bin/time -v; the script prints run's summary and the process's peak RSS. The trace and
# the report stay in BUILD_DIR/gemma3-long.
set -euo pipefail
cd "$(dirname "$0")/.."
tokens=32704 max_tokens=64 config=configs/gemma3.json build_dir=build/release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tokens) tokens=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    *) echo "gemma3-long.sh: unknown option '$1' (see the header of scripts/gemma3-long.sh)" >&2; exit 2 ;;
  esac
done
whole() { [[ $2 =~ ^[0-9]+$ ]] && ((${#2} <= 7 && 10#$2 >= $3 && 10#$2 <= 1048576)) ||
  { echo "gemma3-long.sh: $1 must be a whole number from $3 to 1048576, got '$2'" >&2; exit 2; }; }
whole --tokens "$tokens" 2
whole --max-tokens "$max_tokens" 1
model=$(scripts/find-gemma3.sh) || { echo "gemma3-long.sh: the Gemma 3 file is not installed (scripts/find-gemma3.sh)" >&2; exit 1; }
[[ -f $build_dir/build.ninja ]] || cmake --preset release >/dev/null
cmake --build "$build_dir" -- -j2 activekv activekv_tokenize >/dev/null
work="$build_dir/gemma3-long"
mkdir -p "$work"
python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1], encoding="utf-8").read()))' data/eval_text.txt >"$work/corpus.txt"
"$build_dir/src/tokenizer/activekv_tokenize" --model "$model" --corpus "$work/corpus.txt" >"$work/ids.jsonl"
python3 - "$model" "$work/ids.jsonl" "$tokens" "$max_tokens" "$work/trace.jsonl" <<'EOF'
import json, sys
import gguf
model, ids_f, n, max_tokens, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
field = gguf.GGUFReader(model).fields["tokenizer.ggml.bos_token_id"]
bos = int(field.parts[field.data[0]][0])
ids = json.loads(open(ids_f).readline())["ids"]
if not ids:
    sys.exit("gemma3-long.sh: data/eval_text.txt tokenizes to no ids")
prompt = [bos]
while len(prompt) < n:
    prompt += ids[: n - len(prompt)]
with open(out, "w") as f:
    f.write(json.dumps({"id": "long", "arrival_s": 0.0, "prompt_tokens": prompt, "max_tokens": max_tokens}) + "\n")
print(f"prompt: BOS {bos} + {n - 1} ids of data/eval_text.txt ({len(ids)} per copy); {max_tokens} tokens to generate")
EOF
echo "config $config; load $(cut -d' ' -f1 /proc/loadavg); $(date -u +%H:%M) UTC"
/usr/bin/time -v "$build_dir/src/cli/activekv" run --config "$config" --model "$model" --trace "$work/trace.jsonl" \
  --report "$work/report" >"$work/run.txt" 2>"$work/time.txt" || { tail -n 20 "$work/run.txt" "$work/time.txt"; exit 1; }
cat "$work/run.txt"
echo "peak RSS: $(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' "$work/time.txt") KiB; load $(cut -d' ' -f1 /proc/loadavg); $(date -u +%H:%M) UTC"
