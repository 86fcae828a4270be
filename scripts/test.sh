#!/usr/bin/env bash
# The test command: install what is missing, build, run every suite.
#   1. release      every program built optimised, and the tests labelled slow, model or peer run
#                   on it (the model end-to-end runs, the slow budget-invariance run, the
#                   comparisons with llama.cpp where it is installed)
#   2. asan+ubsan   every other test (unit, property, conformance, end-to-end, the quick swarm)
#                   under AddressSanitizer and UndefinedBehaviorSanitizer with expensive
#                   assertions: each test runs once, in the stage that checks it hardest
#                   (docs/TESTING.md, "Stages")
#   3. tsan         the backend and runtime tests under ThreadSanitizer
#   4. fuzz         each libFuzzer target briefly from its committed corpus (scripts/fuzz-quick.sh)
# The sanitizer and fuzz presets compile at -O1 -g1 (line tables only): about a third of
# the compile time of -O2 -g, and reports still name file and line.
# Set STAGES to run a subset, e.g. STAGES="release" scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
export JOBS=${JOBS:-2}
STAGES=${STAGES:-"release asan tsan fuzz"}
started=$SECONDS

stage() { echo; echo "== $1 ($(( SECONDS - started ))s since start)"; }

for s in $STAGES; do
  case "$s" in
    release)
      stage "release: build and test"
      cmake --preset release >/dev/null
      cmake --build --preset release -- -j"$JOBS" programs tests_slow tests_model
      ctest --preset release -j"$JOBS" -L "slow|model|peer"
      ;;
    asan)
      stage "asan+ubsan: build and test (every test not labelled slow, model or peer)"
      cmake --preset asan >/dev/null
      cmake --build --preset asan -- -j"$JOBS"
      # The asan test preset sets ASAN_OPTIONS=intercept_tls_get_addr=0 (docs/TESTING.md,
      # "LeakSanitizer and PoCL's dynamic TLS").
      ctest --preset asan -j"$JOBS" -LE "slow|model|peer"
      ;;
    tsan)
      stage "tsan: backend and runtime tests"
      cmake --preset tsan >/dev/null
      cmake --build --preset tsan -- -j"$JOBS" tests_backend tests_runtime
      # portable_kernel: the portable inner loops again, below the same thread split (the asan
      # stage runs them; docs/TESTING.md).
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" ctest --preset tsan -j"$JOBS" -L "backend|runtime" -LE "cuda|portable_kernel"
      ;;
    fuzz)
      stage "fuzz: every fuzzer briefly"
      FUZZ_SECONDS=${FUZZ_SECONDS:-10} scripts/fuzz-quick.sh
      ;;
    *) echo "test.sh: unknown stage '$s' (use release, asan, tsan, fuzz)" >&2; exit 2 ;;
  esac
done
echo
echo "== all stages passed in $(( SECONDS - started ))s: $STAGES"
