#!/usr/bin/env bash
# cuda-check.sh — on a machine with an NVIDIA GPU, in one go: build the CUDA
# backend, run its conformance tests, run the copy-bandwidth benchmark, and
# write everything to a results directory.
#
#   scripts/cuda-check.sh [RESULTS_DIR]     (default: $OUT, else build/cuda-check)
#   PEAK_GBPS=64 REPEATS=9 JOBS=16 scripts/cuda-check.sh /tmp/results
#
# Writes: RESULTS_DIR/nvidia-smi.txt, build.log, tests.log (cuda_backend_test and
# the conformance suite's CUDA instances), tests.xml and conformance.xml (gtest
# JUnit), bandwidth.txt (one
# line per measurement, then JSON) and summary.txt. Exit status: non-zero when
# the build, a test or the benchmark failed; a test run where every CUDA test
# skipped (no GPU visible) is a failure here, since this script exists to run them.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-${OUT:-build/cuda-check}}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
JOBS=${JOBS:-$(nproc)}
BUILD=build/cuda-check-build
status=0

{ nvidia-smi || echo "nvidia-smi not available"; } > "$RESULTS/nvidia-smi.txt" 2>&1
{ nvcc --version || echo "nvcc not found"; } >> "$RESULTS/nvidia-smi.txt" 2>&1

[[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"
for tool in cmake nvcc c++; do
  command -v "$tool" > /dev/null || { echo "cuda-check: $tool not found (run scripts/install-deps.sh and install the CUDA toolkit)"; echo "missing: $tool" > "$RESULTS/summary.txt"; exit 1; }
done
GENERATOR=(-G Ninja)
command -v ninja > /dev/null || GENERATOR=()  # fall back to CMake's default generator

echo "== configure and build (log: $RESULTS/build.log)"
if ! { cmake -S . -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DACTIVEKV_CUDA=ON \
         ${CUDA_ARCHS:+-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS} &&
       cmake --build "$BUILD" -j "$JOBS" --target cuda_backend_test backend_conformance_test cuda_copy_bandwidth; } > "$RESULTS/build.log" 2>&1; then
  echo "build failed; see $RESULTS/build.log"; tail -30 "$RESULTS/build.log"
  echo "build: FAILED" > "$RESULTS/summary.txt"
  exit 1
fi

echo "== CUDA tests"
TEST_BIN=$(find "$BUILD" -name cuda_backend_test -type f -perm -u+x | head -1)
"$TEST_BIN" --gtest_output="xml:$RESULTS/tests.xml" > "$RESULTS/tests.log" 2>&1
test_rc=$?
# The shared conformance suite, its CUDA instances only.
CONFORMANCE_BIN=$(find "$BUILD" -name backend_conformance_test -type f -perm -u+x | head -1)
"$CONFORMANCE_BIN" --gtest_filter='*/cuda*' --gtest_output="xml:$RESULTS/conformance.xml" >> "$RESULTS/tests.log" 2>&1 || test_rc=1
skipped=$(grep -c "^\[  SKIPPED \] .*\(CudaBackend\.\|/cuda\)" "$RESULTS/tests.log" || true)
passed=$(grep -c "^\[       OK \] .*\(CudaBackend\.\|/cuda\)" "$RESULTS/tests.log" || true)
echo "tests: rc=$test_rc passed=$passed skipped=$skipped" | tee "$RESULTS/summary.txt"
if (( test_rc != 0 )); then status=1; fi
if (( passed <= 1 )); then echo "no CUDA test ran on a GPU (all skipped?)" | tee -a "$RESULTS/summary.txt"; status=1; fi

echo "== copy bandwidth"
BENCH_BIN=$(find "$BUILD" -name cuda_copy_bandwidth -type f -perm -u+x | head -1)
if "$BENCH_BIN" "${PEAK_GBPS:-64}" "${REPEATS:-9}" > "$RESULTS/bandwidth.txt" 2>&1; then
  cat "$RESULTS/bandwidth.txt"
  echo "bandwidth: ok" >> "$RESULTS/summary.txt"
else
  cat "$RESULTS/bandwidth.txt"; echo "bandwidth: FAILED" >> "$RESULTS/summary.txt"; status=1
fi
echo "results in $RESULTS"
exit $status
