#!/usr/bin/env python3
"""The GGUF reader reads what the Python `gguf` package reads.

Runs activekv_gguf_dump on the default model and compares, against
gguf.GGUFReader on the same file: every metadata key in order, its value types
and its value (whole arrays: 49,152 tokens, 48,900 merges, 49,152 token types),
and every tensor's name, shape, ggml type, absolute data offset, byte size and
element count. Fails (never skips) when numpy or gguf is missing: scripts/
install-deps.sh --test installs them.
"""
import argparse
import importlib.metadata
import json
import math
import subprocess
import sys


def fail(message):
    print(f"compare_metadata: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import numpy  # noqa: F401
    import gguf
except ImportError as e:
    fail(f"{e}; install the test packages with scripts/install-deps.sh --test")


def python_value(field):
    types = [int(t) for t in field.types]
    if types[0] == gguf.GGUFValueType.ARRAY:
        if types[1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        if types[1] == gguf.GGUFValueType.ARRAY:
            return None  # nested arrays: the gguf package does not expose them as values
        return [field.parts[i][0].item() for i in field.data]
    if types[0] == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]][0].item()


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=0) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--find-model", required=True)
    args = ap.parse_args()
    model = subprocess.run([args.find_model], capture_output=True, text=True).stdout.strip()
    if not model:
        fail("the default model is not installed (scripts/install-deps.sh installs it)")
    dump = subprocess.run([args.tool, "--model", model], capture_output=True, text=True, encoding="utf-8")
    if dump.returncode != 0:
        fail(f"{args.tool} exited {dump.returncode}: {dump.stderr.strip()}")
    ours = json.loads(dump.stdout)
    reader = gguf.GGUFReader(model)

    # The gguf package lists the header as pseudo-keys GGUF.*; the rest are the file's keys.
    fields = [(k, f) for k, f in reader.fields.items() if not k.startswith("GGUF.")]
    if [k for k, _ in fields] != [m["key"] for m in ours["metadata"]]:
        fail("metadata keys differ: " + str([k for k, _ in fields]) + " vs " + str([m["key"] for m in ours["metadata"]]))
    if ours["version"] != python_value(reader.fields["GGUF.version"]):
        fail("version differs")
    compared_values = 0
    for (key, field), mine in zip(fields, ours["metadata"]):
        types = [int(t) for t in field.types]
        if types != mine["types"]:
            fail(f"{key}: types {mine['types']} vs {types}")
        value = python_value(field)
        if value is None:
            continue
        if not same(mine["value"], value):
            fail(f"{key}: value differs")
        compared_values += len(value) if isinstance(value, list) else 1

    if len(reader.tensors) != len(ours["tensors"]):
        fail(f"{len(ours['tensors'])} tensors vs {len(reader.tensors)}")
    for t, mine in zip(reader.tensors, ours["tensors"]):
        theirs = {"name": t.name, "shape": [int(x) for x in t.shape], "type": int(t.tensor_type),
                  "data_offset": int(t.data_offset), "n_bytes": int(t.n_bytes), "n_elements": int(t.n_elements)}
        if theirs != mine:
            fail(f"tensor {t.name}: {mine} vs {theirs}")
    print(f"compare_metadata: {len(fields)} keys ({compared_values} values) and {len(reader.tensors)} tensor infos "
          f"equal to gguf {importlib.metadata.version('gguf')}")


if __name__ == "__main__":
    main()
