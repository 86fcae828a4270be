#!/usr/bin/env python3
"""An independent reference forward pass of a Llama-architecture GGUF model.

Written with numpy and the `gguf` package only (which reads the file and
dequantises every tensor type): it shares no code with the engine. It runs the
whole prompt at once with full causal attention in float64 — no KV cache, no
pages, no chunking — so it is as plain a statement of the model as possible:

    x = token_embd[tokens]
    per layer: h = rmsnorm(x)*attn_norm; q,k,v = h@Wq.T, h@Wk.T, h@Wv.T
               rope(q), rope(k): GGUF adjacent pairs (2i, 2i+1), angle pos*theta^(-2i/d)
               softmax(q k^T / sqrt(d) + causal mask) v, kv head = q head // (q_heads/kv_heads)
               x += attn@Wo.T; h = rmsnorm(x)*ffn_norm; x += (silu(h@Wg.T)*(h@Wu.T))@Wd.T
    logits = rmsnorm(x)*output_norm @ (output or token_embd).T

Usage:
  reference_forward.py --model M.gguf --tokens 1,2,3 --out logits.f32 [--positions last|all]
Writes float32 little-endian logits: the last position's (vocab values) or every
position's (tokens x vocab). Exit code 3 when numpy or gguf is missing.
"""
import argparse
import sys

try:
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize
except ImportError as exc:  # the ctest turns this into a skip with the reason
    print(f"missing python package: {exc}", file=sys.stderr)
    sys.exit(3)


class Weights:
    def __init__(self, path):
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}

    def field(self, key):
        f = self.reader.fields[key]
        value = f.parts[f.data[0]]
        return value[0] if len(value) == 1 else value

    def get(self, name):
        t = self.tensors[name]
        # numpy shape is the reverse of ggml's ne: [rows, cols] for a matrix.
        return dequantize(t.data, t.tensor_type).astype(np.float64)

    def has(self, name):
        return name in self.tensors


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, theta, dims):
    # x: [T, heads, head_dim]; rotate adjacent pairs of the first `dims` elements.
    i = np.arange(dims // 2, dtype=np.float64)
    freqs = theta ** (-2.0 * i / dims)
    angles = positions[:, None].astype(np.float64) * freqs[None, :]  # [T, dims/2]
    c = np.cos(angles)[:, None, :]
    s = np.sin(angles)[:, None, :]
    x = x.copy()
    x0 = x[..., 0:dims:2].copy()
    x1 = x[..., 1:dims:2].copy()
    x[..., 0:dims:2] = x0 * c - x1 * s
    x[..., 1:dims:2] = x0 * s + x1 * c
    return x


def forward(w, tokens):
    arch = bytes(w.field("general.architecture")).decode()
    assert arch == "llama", arch
    n_layers = int(w.field("llama.block_count"))
    n_heads = int(w.field("llama.attention.head_count"))
    n_kv = int(w.field("llama.attention.head_count_kv"))
    eps = float(w.field("llama.attention.layer_norm_rms_epsilon"))
    theta = float(w.field("llama.rope.freq_base"))
    emb = w.get("token_embd.weight")  # [vocab, embedding]
    d_model = emb.shape[1]
    head_dim = d_model // n_heads
    rope_dims = int(w.field("llama.rope.dimension_count"))
    group = n_heads // n_kv
    T = len(tokens)
    pos = np.arange(T)
    x = emb[np.array(tokens)]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for layer in range(n_layers):
        p = f"blk.{layer}."
        h = rmsnorm(x, w.get(p + "attn_norm.weight"), eps)
        q = (h @ w.get(p + "attn_q.weight").T).reshape(T, n_heads, head_dim)
        k = (h @ w.get(p + "attn_k.weight").T).reshape(T, n_kv, head_dim)
        v = (h @ w.get(p + "attn_v.weight").T).reshape(T, n_kv, head_dim)
        q = rope(q, pos, theta, rope_dims)
        k = rope(k, pos, theta, rope_dims)
        # The engine stores K and V as f16: round them the same way (a property
        # of the storage format, not of the engine's code).
        k = k.astype(np.float16).astype(np.float64)
        v = v.astype(np.float16).astype(np.float64)
        out = np.empty((T, n_heads, head_dim))
        for hq in range(n_heads):
            hk = hq // group
            scores = q[:, hq, :] @ k[:, hk, :].T / np.sqrt(head_dim) + mask
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
            out[:, hq, :] = scores @ v[:, hk, :]
        x = x + out.reshape(T, d_model) @ w.get(p + "attn_output.weight").T
        h = rmsnorm(x, w.get(p + "ffn_norm.weight"), eps)
        g = h @ w.get(p + "ffn_gate.weight").T
        u = h @ w.get(p + "ffn_up.weight").T
        x = x + ((g / (1.0 + np.exp(-g))) * u) @ w.get(p + "ffn_down.weight").T
    x = rmsnorm(x, w.get("output_norm.weight"), eps)
    out_w = w.get("output.weight") if w.has("output.weight") else emb
    return x @ out_w.T  # [T, vocab]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True)
    ap.add_argument("--positions", choices=["last", "all"], default="last")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    logits = forward(Weights(args.model), tokens)
    if args.positions == "last":
        logits = logits[-1]
    logits.astype("<f4").tofile(args.out)
    top = np.argsort(logits.reshape(-1, logits.shape[-1])[-1])[::-1][:5]
    print("top tokens:", list(map(int, top)))


if __name__ == "__main__":
    main()
