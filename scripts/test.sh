#!/usr/bin/env bash
# The test command: install what is missing, build, run every test suite.
#   release build: all unit, property, conformance and end-to-end tests (ctest)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
JOBS=${JOBS:-2}

echo "== release: build and test"
cmake --preset release >/dev/null
cmake --build --preset release -- -j"$JOBS"
ctest --preset release -j"$JOBS"
