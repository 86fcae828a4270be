#!/usr/bin/env python3
"""Writes random ggml blocks of every type the engine reads, and their values as the
Python `gguf` package dequantises them (gguf.quants.dequantize), to a JSON file. The
engine's quant_test.cpp checks its own dequantisation against these bit for bit, so
each block format is verified by an implementation the engine shares nothing with.
ctest runs this before engine_quant_test and writes into the build folder; nothing
is committed.

Blocks are random bytes (every bit pattern of the packed integers and 6-bit scales is
a valid block) with each f16 scale field replaced by a finite value, so no element is
inf or NaN. A fixed seed keeps a failure reproducible; --seed changes it.

Usage: python3 tests/reference/make_quant_vectors.py OUTPUT.json [--seed N]
"""
import argparse
import json
import os

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

# (type, byte offsets of the f16 scale fields inside a block)
TYPES = [
    (T.F32, []),
    (T.F16, []),
    (T.BF16, []),
    (T.Q4_0, [0]),
    (T.Q4_1, [0, 2]),
    (T.Q5_0, [0]),
    (T.Q5_1, [0, 2]),
    (T.Q8_0, [0]),
    (T.Q2_K, [80, 82]),
    (T.Q3_K, [108]),
    (T.Q4_K, [0, 2]),
    (T.Q5_K, [0, 2]),
    (T.Q6_K, [208]),
]
ELEMENTS = 8192  # 32 super-blocks of the K types, 256 blocks of the others


def random_blocks(rng, qtype, scale_offsets, elements):
    block_elements, block_bytes = GGML_QUANT_SIZES[qtype]
    blocks = elements // block_elements
    if qtype == T.F32:
        return rng.standard_normal(elements).astype(np.float32).view(np.uint8)
    if qtype == T.F16:
        return rng.standard_normal(elements).astype(np.float16).view(np.uint8)
    if qtype == T.BF16:
        f = rng.standard_normal(elements).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        # Mostly normal scales of either sign; one block in 16 gets a subnormal or zero one.
        s = (rng.standard_normal(blocks) * 0.05).astype(np.float16)
        tiny = rng.integers(0, 16, size=blocks) == 0
        s[tiny] = (rng.integers(0, 1024, size=int(tiny.sum()), dtype=np.uint16)).view(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(blocks, 2)
    return raw.reshape(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--seed", type=int, default=20261202)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    doc = {}
    for qtype, offsets in TYPES:
        block_elements, block_bytes = GGML_QUANT_SIZES[qtype]
        assert all(off + 2 <= block_bytes for off in offsets), qtype.name
        raw = random_blocks(rng, qtype, offsets, ELEMENTS)
        values = dequantize(raw, qtype).astype(np.float32).reshape(-1)
        assert values.size == ELEMENTS and np.isfinite(values).all(), qtype.name
        # The values as their float32 bytes: no decimal round trip between the two sides.
        doc[qtype.name] = {"hex": raw.tobytes().hex(), "values_f32_hex": values.astype("<f4").tobytes().hex()}
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(doc, f)
    print(f"wrote {args.output}: {len(TYPES)} types × {ELEMENTS} values")


if __name__ == "__main__":
    main()
