#!/usr/bin/env python3
"""Writes a Llama-architecture GGUF with random weights in a chosen quantisation mix,
and the default model's vocabulary (its tokenizer.* keys copied), for speed
measurements of the weight formats against llama.cpp on the same file and for
load tests. The numbers it computes are meaningless; the shapes, types and bytes
are those of a real file.

Quantised tensors are random bytes with every f16 scale field set to a small
finite value (so activations stay finite through the RMS norms).

Mixes: a single type name (Q4_K, Q6_K, Q8_0, ...: every matrix of that type), or
  Q4_K_M  attn_v and ffn_down Q6_K, the other matrices Q4_K, token_embd Q6_K
          (tied, so the output matrix is Q6_K as llama.cpp's Q4_K_M makes it)
  Q5_K_M  the same with Q5_K in place of Q4_K

Usage: python3 tests/reference/make_random_llama.py OUT.gguf --mix Q4_K_M
           [--vocab-from DEFAULT.gguf] [--vocab-cache DIR] [--layers 8] [--embedding 1024] [--ffn 2816]
           [--heads 16] [--kv-heads 4] [--seed 1]
"""
import argparse
import os
import subprocess
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFWriter
from gguf import GGMLQuantizationType as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_model import copy_tokenizer  # noqa: E402  (the tokenizer.* keys, cached with --vocab-cache)

# Byte offsets of each type's f16 scale fields, and the scale they get.
SCALES = {
    T.Q4_0: [(0, 0.01)], T.Q4_1: [(0, 0.01), (2, -0.05)], T.Q5_0: [(0, 0.005)], T.Q5_1: [(0, 0.005), (2, -0.05)],
    T.Q8_0: [(0, 0.001)], T.Q2_K: [(80, 0.01), (82, 0.005)], T.Q3_K: [(108, 0.002)],
    T.Q4_K: [(0, 0.001), (2, 0.001)], T.Q5_K: [(0, 0.0005), (2, 0.001)], T.Q6_K: [(208, 0.0002)],
}


def random_tensor(rng, qtype, cols, rows):
    if qtype == T.F32:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    if qtype == T.F16:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)
    block_elements, block_bytes = GGML_QUANT_SIZES[qtype]
    assert cols % block_elements == 0, f"{cols} columns are not whole {qtype.name} blocks"
    blocks = rows * cols // block_elements
    raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    for offset, scale in SCALES[qtype]:
        s = (scale * (0.5 + rng.random(blocks))).astype(np.float16)
        raw[:, offset:offset + 2] = s.view(np.uint8).reshape(blocks, 2)
    return raw.reshape(rows, cols // block_elements * block_bytes)


def matrix_type(mix, name):
    if mix in ("Q4_K_M", "Q5_K_M"):
        if name.endswith(("attn_v.weight", "ffn_down.weight")) or name == "token_embd.weight":
            return T.Q6_K
        return T.Q4_K if mix == "Q4_K_M" else T.Q5_K
    return T[mix]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("output")
    p.add_argument("--mix", default="Q4_K_M")
    p.add_argument("--vocab-from", default=None)
    p.add_argument("--vocab-cache", default=None, help="a folder where --vocab-from's keys are kept between runs")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--embedding", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=2816)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    find_model = os.path.join(here, "..", "..", "scripts", "find-model.sh")
    vocab_from = a.vocab_from or subprocess.check_output([find_model], text=True).strip()
    rng = np.random.default_rng(a.seed)
    head_dim = a.embedding // a.heads
    w = GGUFWriter(a.output, "llama")
    w.add_name(f"random llama {a.mix}")
    w.add_block_count(a.layers)
    w.add_context_length(a.context)
    w.add_embedding_length(a.embedding)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    vocab = copy_tokenizer(w, vocab_from, a.vocab_cache)
    w.add_vocab_size(vocab)

    def add(name, cols, rows):
        qtype = matrix_type(a.mix, name)
        data = random_tensor(rng, qtype, cols, rows)
        if qtype in (T.F32, T.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)

    add("token_embd.weight", a.embedding, vocab)
    w.add_tensor("output_norm.weight", np.ones(a.embedding, dtype=np.float32))
    kv = a.kv_heads * head_dim
    for l in range(a.layers):
        b = f"blk.{l}."
        w.add_tensor(b + "attn_norm.weight", np.ones(a.embedding, dtype=np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(a.embedding, dtype=np.float32))
        add(b + "attn_q.weight", a.embedding, a.embedding)
        add(b + "attn_k.weight", a.embedding, kv)
        add(b + "attn_v.weight", a.embedding, kv)
        add(b + "attn_output.weight", a.embedding, a.embedding)
        add(b + "ffn_gate.weight", a.embedding, a.ffn)
        add(b + "ffn_up.weight", a.embedding, a.ffn)
        add(b + "ffn_down.weight", a.ffn, a.embedding)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.output}: {a.layers} layers, {a.embedding} × {a.ffn}, mix {a.mix}")


if __name__ == "__main__":
    main()
