#!/usr/bin/env bash
# quant-bench.sh — prefill and decode speed per weight type against llama.cpp's llama-bench, on the
# same random-weight Llama-layout file per type, alternating the two programs in one session.
#
#   scripts/quant-bench.sh [--types Q4_0,Q4_1,Q5_0,Q8_0,Q4_K,Q5_K,Q6_K,F16] [--threads 2]
#                          [--prompt 512] [--decode 128] [--rounds 2] [--build-dir build/release]
#                          [--activations q8|q16]
#
# Each file: tests/reference/make_random_llama.py FILE --mix TYPE (8 layers, 1024 wide, FFN 2816,
# 16 heads, 4 KV heads, the default model's 49,152-token vocabulary; every matrix of TYPE, the
# embeddings too), written once into BUILD_DIR/quant-bench/. Per round and type:
#   ours: ACTIVEKV_MODEL=FILE engine_bench --context P --decode N --chunk P --threads T --activations A
#         (A: q8 by default, llama.cpp's 8-bit activation arithmetic for Q4_K/Q5_K/Q6_K; q16 the engine's default)
#         (prefill: P prompt tokens from an empty context in one chunk; decode: N steps after it)
#   peer: llama-bench -m FILE -t T -fa 1 -p P -n 0 -r 1 --no-warmup           (prefill)
#         llama-bench -m FILE -t T -fa 1 -p 0 -n N -d P -r 1 --no-warmup      (decode at depth P)
# The load average is printed beside every run; the table gives medians over rounds and the
# ratios ActiveKV ÷ llama.cpp (> 1: ActiveKV faster). The peer is built once by
# ../shared/peer/llama-bench.sh (PEER_SCRIPT overrides it); without it the script says so and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

types=Q4_0,Q4_1,Q5_0,Q8_0,Q4_K,Q5_K,Q6_K,F16
threads=2 prompt=512 decode=128 rounds=2 build_dir=build/release activations=q8
while [[ $# -gt 0 ]]; do
  case "$1" in
    --types) types=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --decode) decode=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --activations) activations=$2; shift 2 ;;
    *) echo "quant-bench.sh: unknown option '$1' (see the header of scripts/quant-bench.sh)" >&2; exit 2 ;;
  esac
done
peer_script=${PEER_SCRIPT:-../shared/peer/llama-bench.sh}
[[ -x $peer_script ]] || { echo "quant-bench.sh: the peer needs $peer_script (or PEER_SCRIPT=...)" >&2; exit 1; }
ours="$build_dir/src/engine/engine_bench"
[[ -f $build_dir/build.ninja ]] || cmake --preset release >/dev/null
cmake --build "$build_dir" -- -j2 engine_bench >/dev/null
work="$build_dir/quant-bench"
mkdir -p "$work"
IFS=, read -r -a tlist <<<"$types"
for t in "${tlist[@]}"; do
  f="$work/llama-$t.gguf"
  [[ -f $f ]] || python3 tests/reference/make_random_llama.py "$f.tmp" --mix "$t" --vocab-cache "$work/vocab-cache" >/dev/null
  [[ -f $f ]] || mv "$f.tmp" "$f"
done

results=$(mktemp)
trap 'rm -f "$results"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
peer_rate() {  # llama-bench's CSV: the last row's avg_ts
  "$peer_script" "$@" -o csv 2>/dev/null | tail -n 1 | python3 -c 'import csv,sys; r=next(csv.reader(sys.stdin)); print(r[-2])' 2>/dev/null || echo nan
}
echo "threads $threads; prefill $prompt tokens; decode $decode steps after it; rounds $rounds; ActiveKV --activations $activations"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for round in $(seq 1 "$rounds"); do
  for t in "${tlist[@]}"; do
    f="$work/llama-$t.gguf"
    l=$(load)
    out=$(ACTIVEKV_MODEL=$f "$ours" --context "$prompt" --decode "$decode" --chunk "$prompt" --threads "$threads" --activations "$activations")
    pre=$(sed -n 's/^prefill .*s, \([0-9.]*\) tokens\/s;.*/\1/p' <<<"$out")
    dec=$(sed -n 's/^decode .*s, \([0-9.]*\) tokens\/s (.*/\1/p' <<<"$out")
    echo "ours $t prefill ${pre:-nan} $l" >>"$results"
    echo "ours $t decode ${dec:-nan} $l" >>"$results"
    l2=$(load)
    ppre=$(peer_rate -m "$f" -t "$threads" -fa 1 -p "$prompt" -n 0 -r 1 --no-warmup)
    l3=$(load)
    pdec=$(peer_rate -m "$f" -t "$threads" -fa 1 -p 0 -n "$decode" -d "$prompt" -r 1 --no-warmup)
    echo "peer $t prefill $ppre $l2" >>"$results"
    echo "peer $t decode $pdec $l3" >>"$results"
    echo "round $round $t: ours prefill ${pre:-?} decode ${dec:-?} (load $l); llama.cpp prefill $ppre decode $pdec (load $l2 / $l3) tok/s"
  done
done

python3 - "$results" "$types" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
types = sys.argv[2].split(",")
def med(who, t, kind):
    v = [float(r[3]) for r in rows if r[0] == who and r[1] == t and r[2] == kind and r[3] != "nan"]
    return statistics.median(v) if v else None
loads = [float(r[4]) for r in rows]
print()
print(f"medians over rounds, tokens/s; load average during the runs {min(loads):.1f}-{max(loads):.1f}")
print("| type | prefill ActiveKV | prefill llama.cpp | ratio | decode ActiveKV | decode llama.cpp | ratio |")
print("|---|---|---|---|---|---|---|")
for t in types:
    cells = []
    for kind in ("prefill", "decode"):
        o, p = med("ours", t, kind), med("peer", t, kind)
        cells += [f"{o:.1f}" if o else "-", f"{p:.1f}" if p else "-", f"{o / p:.2f}" if o and p else "-"]
    print(f"| {t} | " + " | ".join(cells) + " |")
EOF
