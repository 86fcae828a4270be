#!/usr/bin/env python3
"""Writes src/engine/testdata/quant_vectors.json: random ggml blocks of every type
the engine computes with, and their values as the Python `gguf` package dequantises
them. The engine's quant_test.cpp checks its own dequantisation against these, so
the block formats are verified by an implementation the engine shares nothing with.

Usage: python3 tests/reference/make_quant_vectors.py [output.json]
"""
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize

# (type, byte offsets of f16 scale fields inside a block)
TYPES = [
    (T.F32, []),
    (T.F16, []),
    (T.BF16, []),
    (T.Q4_0, [0]),
    (T.Q4_1, [0, 2]),
    (T.Q5_0, [0]),
    (T.Q5_1, [0, 2]),
    (T.Q8_0, [0]),
    (T.Q4_K, [0, 2]),
    (T.Q6_K, [208]),
]


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
        s = (rng.standard_normal(blocks) * 0.05).astype(np.float16).view(np.uint8).reshape(blocks, 2)
        raw[:, off:off + 2] = s
    return raw.reshape(-1)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "src", "engine", "testdata",
                                                           "quant_vectors.json")
    rng = np.random.default_rng(20261129)
    elements = 512
    doc = {}
    for qtype, offsets in TYPES:
        raw = random_blocks(rng, qtype, offsets, elements)
        values = dequantize(raw, qtype).astype(np.float32).reshape(-1)
        assert values.size == elements
        doc[qtype.name] = {"hex": raw.tobytes().hex(), "values": [float(v) for v in values]}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
