#!/usr/bin/env bash
# bench-peer.sh — this engine's prefill and decode speed on the default model,
# side by side with llama.cpp's llama-bench when asked, alternating the two
# programs at each length, medians and ratios in one table.
#
#   scripts/bench-peer.sh [--with-peer] [--threads T] [--lengths 512,2048,8000]
#                         [--repeat R] [--decode N] [--chunk C] [--build-dir DIR]
#
#   --with-peer   also run the peer (built once by ../shared/peer/llama-bench.sh,
#                 about 4 minutes of both cores; PEER_SCRIPT overrides the path)
#   --threads     threads for both programs (default 2)
#   --lengths     context lengths (default 512,2048,8000)
#   --repeat      alternating rounds per length (default 3); medians are reported
#   --decode      decode tokens measured after each prompt (default 32)
#   --chunk       this engine's prefill chunk (default 512, the peer's micro-batch)
#
# Rows: "prefill L" = L prompt tokens from an empty context (ours: engine_bench
# --context L; peer: llama-bench -p L -n 0); "decode at L" = tokens/s of decode
# after an L-token prompt (ours: the --decode steps after the prompt; peer:
# llama-bench -p 0 -n N -d L). Both: flash attention on (-fa 1), f16 KV, one run per
# round and no warm-up run (--no-warmup; engine_bench has none either).
# The machine's load (uptime) is printed before every run: on a shared machine
# the ratios of one table are what to compare, not the absolute rates.
set -euo pipefail
cd "$(dirname "$0")/.."

with_peer=0
threads=2
lengths=512,2048,8000
repeat=3
decode=32
chunk=512
build_dir=build/release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --with-peer) with_peer=1; shift ;;
    --threads) threads=$2; shift 2 ;;
    --lengths) lengths=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --decode) decode=$2; shift 2 ;;
    --chunk) chunk=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    *) echo "bench-peer.sh: unknown option '$1' (see the header of scripts/bench-peer.sh)" >&2; exit 2 ;;
  esac
done

model=$(scripts/find-model.sh) || { echo "bench-peer.sh: the default model is not installed (scripts/find-model.sh)" >&2; exit 1; }
ours="$build_dir/src/engine/engine_bench"
if [[ ! -x "$ours" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release -- -j2 engine_bench >/dev/null
fi
peer_script=${PEER_SCRIPT:-../shared/peer/llama-bench.sh}
if [[ $with_peer == 1 && ! -x "$peer_script" ]]; then
  echo "bench-peer.sh: --with-peer needs $peer_script (or PEER_SCRIPT=...)" >&2
  exit 1
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT
load() { uptime | sed 's/.*load average: //' | cut -d, -f1; }

echo "model: $model; threads: $threads; lengths: $lengths; rounds: $repeat; decode tokens: $decode; our chunk: $chunk"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
IFS=, read -r -a lens <<<"$lengths"
for round in $(seq 1 "$repeat"); do
  for len in "${lens[@]}"; do
    l=$(load)
    out=$("$ours" --context "$len" --decode "$decode" --threads "$threads" --chunk "$chunk")
    pre=$(sed -n 's/^prefill .*s, \([0-9.]*\) tokens\/s;.*/\1/p' <<<"$out")
    dec=$(sed -n 's/^decode .*s, \([0-9.]*\) tokens\/s (.*/\1/p' <<<"$out")
    echo "ours prefill $len $pre $l" >>"$results"
    echo "ours decode $len $dec $l" >>"$results"
    echo "round $round, $len tokens: ours prefill $pre tok/s, decode $dec tok/s (load $l)"
    if [[ $with_peer == 1 ]]; then
      l=$(load)
      pre=$("$peer_script" -m "$model" -t "$threads" -fa 1 -p "$len" -n 0 -r 1 --no-warmup -o csv 2>/dev/null | tail -n 1 |
            python3 -c 'import csv,sys; r=next(csv.reader(sys.stdin)); print(r[-2])' 2>/dev/null || true)
      l2=$(load)
      dec=$("$peer_script" -m "$model" -t "$threads" -fa 1 -p 0 -n "$decode" -d "$len" -r 1 --no-warmup -o csv 2>/dev/null | tail -n 1 |
            python3 -c 'import csv,sys; r=next(csv.reader(sys.stdin)); print(r[-2])' 2>/dev/null || true)
      echo "peer prefill $len ${pre:-nan} $l" >>"$results"
      echo "peer decode $len ${dec:-nan} $l2" >>"$results"
      echo "round $round, $len tokens: peer prefill ${pre:-?} tok/s, decode ${dec:-?} tok/s (load $l / $l2)"
    fi
  done
done

python3 - "$results" "$lengths" "$with_peer" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
lengths = [int(x) for x in sys.argv[2].split(',')]
peer = sys.argv[3] == '1'
def med(who, kind, n):
    v = [float(r[3]) for r in rows if r[0] == who and r[1] == kind and int(r[2]) == n and r[3] != 'nan']
    return (statistics.median(v), min(v), max(v), len(v)) if v else None
loads = [float(r[4]) for r in rows]
print()
print(f"medians over rounds, tokens/s (min-max); load average during the runs {min(loads):.1f}-{max(loads):.1f}")
print("| | ActiveKV | llama.cpp | ratio |" if peer else "| | ActiveKV |")
print("|---|---|---|---|" if peer else "|---|---|")
for kind, label in (("prefill", "prefill {} tokens"), ("decode", "decode at {}")):
    for n in lengths:
        o = med("ours", kind, n)
        cell = f"{o[0]:.1f} ({o[1]:.1f}-{o[2]:.1f})" if o else "-"
        if peer:
            p = med("peer", kind, n)
            pc = f"{p[0]:.1f} ({p[1]:.1f}-{p[2]:.1f})" if p else "-"
            ratio = f"{o[0] / p[0]:.2f}x" if o and p else "-"
            print(f"| {label.format(n)} | {cell} | {pc} | {ratio} |")
        else:
            print(f"| {label.format(n)} | {cell} |")
EOF
