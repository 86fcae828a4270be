#!/usr/bin/env python3
"""Writes a small random-weight GGUF of one of the engine's architectures.

The files are built with the `gguf` package's writer and quantiser, the way
llama.cpp's converter lays them out (tensor names, metadata keys), so that the
engine's loader and the independent reference (reference_forward.py) read the
same model. Weights are drawn from a seeded generator; matrices are stored in
the chosen mix of types:

  f32   every matrix F32            f16  every matrix F16
  q8    attention Q8_0, FFN Q4_0, token_embd Q8_0 (output, where separate, Q8_0)
  q4    attention Q4_0, FFN Q8_0, token_embd F16 (output, where separate, Q4_0)

Variants (--variant) exercise the optional parts of each architecture:
  llama   plain | rope_freqs (Llama 3 factors, separate output) | window (Mistral-style, every layer)
          | linear (rope.scaling linear)
  qwen2   plain (QKV biases, separate output)
  qwen3   plain (per-head Q/K norms, key_length ≠ embedding / heads)
  gemma3  plain (6 layers: 5 window + 1 full, the default pattern) | pattern (a per-layer array)

Usage: make_arch_model.py --arch A --mix M [--variant V] --out FILE.gguf
Exit code 3 when numpy or gguf is missing.
"""
import argparse
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
except ImportError as exc:
    print(f"missing python package: {exc}", file=sys.stderr)
    sys.exit(3)

EMBEDDING, FFN, HEADS, KV_HEADS, VOCAB, CONTEXT = 64, 128, 4, 2, 256, 512

MIXES = {
    "f32": dict(attn=T.F32, ffn=T.F32, embd=T.F32, out=T.F32),
    "f16": dict(attn=T.F16, ffn=T.F16, embd=T.F16, out=T.F16),
    "q8": dict(attn=T.Q8_0, ffn=T.Q4_0, embd=T.Q8_0, out=T.Q8_0),
    "q4": dict(attn=T.Q4_0, ffn=T.Q8_0, embd=T.F16, out=T.Q4_0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, choices=["llama", "qwen2", "qwen3", "gemma3"])
    ap.add_argument("--mix", required=True, choices=sorted(MIXES))
    ap.add_argument("--variant", default="plain")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--window", type=int, default=64, help="attention.sliding_window where the file has one")
    args = ap.parse_args()
    arch, variant, mix = args.arch, args.variant, MIXES[args.mix]
    rng = np.random.default_rng(args.seed)

    layers = 6 if arch == "gemma3" else 2
    head_dim = 32 if arch in ("qwen3", "gemma3") else EMBEDDING // HEADS
    q_dim, kv_dim = HEADS * head_dim, KV_HEADS * head_dim
    tied = arch in ("gemma3",) or (arch == "llama" and variant in ("plain", "window"))

    w = gguf.GGUFWriter(args.out, arch)
    w.add_name(f"random {arch} {variant} {args.mix}")
    p = arch + "."
    w.add_uint32(p + "block_count", layers)
    w.add_uint32(p + "embedding_length", EMBEDDING)
    w.add_uint32(p + "feed_forward_length", FFN)
    w.add_uint32(p + "attention.head_count", HEADS)
    w.add_uint32(p + "attention.head_count_kv", KV_HEADS)
    w.add_uint32(p + "context_length", CONTEXT)
    w.add_float32(p + "rope.freq_base", 1000000.0 if arch != "llama" else 10000.0)
    w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-6 if arch != "llama" else 1e-5)
    if head_dim != EMBEDDING // HEADS:
        w.add_uint32(p + "attention.key_length", head_dim)
        w.add_uint32(p + "attention.value_length", head_dim)
    if arch == "llama":
        w.add_uint32(p + "rope.dimension_count", head_dim)
    if arch == "llama" and variant == "window":
        w.add_uint32(p + "attention.sliding_window", args.window)
    if arch == "llama" and variant == "linear":
        w.add_string(p + "rope.scaling.type", "linear")
        w.add_float32(p + "rope.scaling.factor", 4.0)
    if arch == "gemma3":
        w.add_uint32(p + "attention.sliding_window", args.window)
        if variant == "pattern":
            w.add_array(p + "attention.sliding_window_pattern", [True, False, True, True, False, True])

    def matrix(name, rows, cols, qtype, scale):
        data = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        if qtype == T.F32:
            w.add_tensor(name, data)
        elif qtype == T.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)

    def vector(name, n, mean, spread):
        w.add_tensor(name, (mean + spread * rng.standard_normal(n)).astype(np.float32))

    matrix("token_embd.weight", VOCAB, EMBEDDING, mix["embd"], 1.0)
    vector("output_norm.weight", EMBEDDING, 1.0, 0.1)
    if not tied:
        matrix("output.weight", VOCAB, EMBEDDING, mix["out"], 0.15)
    if arch == "llama" and variant == "rope_freqs":
        # Llama 3's factors: 1 for the fast frequencies, up to 8 for the slow ones.
        w.add_tensor("rope_freqs.weight", np.linspace(1.0, 8.0, head_dim // 2).astype(np.float32))
    a = 1.0 / np.sqrt(EMBEDDING)
    for l in range(layers):
        b = f"blk.{l}."
        vector(b + "attn_norm.weight", EMBEDDING, 1.0, 0.1)
        matrix(b + "attn_q.weight", q_dim, EMBEDDING, mix["attn"], 2.0 * a)
        matrix(b + "attn_k.weight", kv_dim, EMBEDDING, mix["attn"], 2.0 * a)
        matrix(b + "attn_v.weight", kv_dim, EMBEDDING, mix["attn"], a)
        matrix(b + "attn_output.weight", EMBEDDING, q_dim, mix["attn"], 1.0 / np.sqrt(q_dim))
        if arch == "qwen2":
            vector(b + "attn_q.bias", q_dim, 0.0, 0.2)
            vector(b + "attn_k.bias", kv_dim, 0.0, 0.2)
            vector(b + "attn_v.bias", kv_dim, 0.0, 0.2)
        if arch in ("qwen3", "gemma3"):
            vector(b + "attn_q_norm.weight", head_dim, 1.0, 0.2)
            vector(b + "attn_k_norm.weight", head_dim, 1.0, 0.2)
        if arch == "gemma3":
            vector(b + "post_attention_norm.weight", EMBEDDING, 1.0, 0.1)
            vector(b + "post_ffw_norm.weight", EMBEDDING, 1.0, 0.1)
        vector(b + "ffn_norm.weight", EMBEDDING, 1.0, 0.1)
        matrix(b + "ffn_gate.weight", FFN, EMBEDDING, mix["ffn"], a)
        matrix(b + "ffn_up.weight", FFN, EMBEDDING, mix["ffn"], a)
        matrix(b + "ffn_down.weight", EMBEDDING, FFN, mix["ffn"], 1.0 / np.sqrt(FFN))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
