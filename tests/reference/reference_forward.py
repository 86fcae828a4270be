#!/usr/bin/env python3
"""An independent reference forward pass of a GGUF model of the engine's architectures.

Written with numpy and the `gguf` package only (which reads the file and
dequantises every tensor type): it shares no code with the engine. It runs the
whole prompt at once with full causal attention in float64 — no KV cache, no
pages, no chunking — so it is as plain a statement of the model as possible,
written from the architectures' definitions (llama.cpp's src/models/):

    x = token_embd[tokens]                       (gemma3: × sqrt(embedding))
    per layer: h = rmsnorm(x)*attn_norm; q,k,v = h@Wq.T (+bq), h@Wk.T (+bk), h@Wv.T (+bv)   qwen2: biases
               qwen3, gemma3: q, k = rmsnorm per head * attn_{q,k}_norm
               rope(q), rope(k): llama adjacent pairs (2i, 2i+1), qwen2/qwen3/gemma3 halves (i, i+d/2);
                 angle = pos * freq_scale * theta^(-2i/d) / rope_freqs[i]
               softmax(q k^T * scale + mask) v, kv head = q head // (q_heads/kv_heads),
                 scale 1/sqrt(key_length); window layers mask keys older than the last W tokens
               o = attn@Wo.T (gemma3: rmsnorm(o)*post_attention_norm); x += o
               h = rmsnorm(x)*ffn_norm; f = (act(h@Wg.T)*(h@Wu.T))@Wd.T, act silu (gemma3: gelu tanh)
               (gemma3: f = rmsnorm(f)*post_ffw_norm); x += f
    logits = rmsnorm(x)*output_norm @ (output or token_embd).T
Qwen3.5 (qwen35), the hybrid: x += mix(rmsnorm(x)*attn_norm), then the FFN with post_attention_norm
as its input norm. mix is, on every full_attention_interval-th layer (or where
attention.recurrent_layers is false), gated attention: attn_q gives per head [query | gate], q and k
get their per-head norms, NeoX RoPE on the first rope.dimension_count elements, and
out = (softmax(q k^T/sqrt(d)) v * sigmoid(gate)) @ Wo.T; elsewhere the Gated DeltaNet
(delta_net below: a causal depthwise convolution of kernel ssm.conv_kernel over h@Wqkv.T, silu,
l2-normalised q and k, and per value head the delta rule on a state matrix S (key x value):
S = exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q / sqrt(d_k), with
g = softplus(h@Walpha.T + dt_bias) * ssm_a, beta = sigmoid(h@Wbeta.T); value head j reads key
head j % group_count), then rmsnorm(o)*ssm_norm*silu(h@Wgate.T) @ Wout.T.
Gemma 3's window layers: l % 6 < 5 unless the file gives attention.sliding_window_pattern
(a period, or one flag per layer); their RoPE base rope.freq_base_swa or 10,000.

Usage:
  reference_forward.py --model M.gguf --tokens 1,2,3 --out logits.f32 [--positions last|all|P1,P2,...]
Writes float32 little-endian logits: the last position's (vocab values) or every
position's (tokens x vocab). Exit code 3 when numpy or gguf is missing.
"""
import argparse
import sys

try:
    import numpy as np
    import gguf
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
        if len(f.data) > 1 or f.types[0] == gguf.GGUFValueType.ARRAY:  # an array: every element
            return [f.parts[i][0] for i in f.data]
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


def rope(x, positions, theta, dims, neox, freq_scale=1.0, factors=None):
    # x: [T, heads, head_dim]; rotate pairs of the first `dims` elements.
    i = np.arange(dims // 2, dtype=np.float64)
    freqs = theta ** (-2.0 * i / dims) * freq_scale
    if factors is not None:
        freqs = freqs / factors
    angles = positions[:, None].astype(np.float64) * freqs[None, :]  # [T, dims/2]
    c = np.cos(angles)[:, None, :]
    s = np.sin(angles)[:, None, :]
    x = x.copy()
    if neox:
        a, b = slice(0, dims // 2), slice(dims // 2, dims)
    else:
        a, b = slice(0, dims, 2), slice(1, dims, 2)
    x0 = x[..., a].copy()
    x1 = x[..., b].copy()
    x[..., a] = x0 * c - x1 * s
    x[..., b] = x0 * s + x1 * c
    return x


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def delta_net(w, b, h, eps, ssm):
    """One Gated DeltaNet layer over the whole prompt h [T, embedding], from an empty state."""
    kernel, d, n_k, n_v = ssm
    T = h.shape[0]
    mixed = h @ w.get(b + "attn_qkv.weight").T                      # [T, conv_dim]
    taps = w.get(b + "ssm_conv1d.weight")                           # [conv_dim, kernel]
    padded = np.concatenate([np.zeros((kernel - 1, mixed.shape[1])), mixed], axis=0)
    conv = np.zeros_like(mixed)
    for j in range(kernel):
        conv += padded[j:j + T] * taps[:, j][None, :]
    conv = silu(conv)
    key_dim = n_k * d
    q = conv[:, :key_dim].reshape(T, n_k, d)
    k = conv[:, key_dim:2 * key_dim].reshape(T, n_k, d)
    v = conv[:, 2 * key_dim:].reshape(T, n_v, d)
    q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + eps)
    k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + eps)
    alpha = h @ w.get(b + "ssm_alpha.weight").T + w.get(b + "ssm_dt.bias")
    softplus = np.where(alpha > 20.0, alpha, np.log1p(np.exp(np.minimum(alpha, 20.0))))
    g = softplus * w.get(b + "ssm_a")                                # [T, n_v]
    beta = sigmoid(h @ w.get(b + "ssm_beta.weight").T)               # [T, n_v]
    out = np.zeros((T, n_v, d))
    for head in range(n_v):
        kh = head % n_k
        S = np.zeros((d, d))                                         # [key, value]
        for t in range(T):
            S = np.exp(g[t, head]) * S
            kt, qt = k[t, kh], q[t, kh] / np.sqrt(d)
            S = S + np.outer(kt, beta[t, head] * (v[t, head] - S.T @ kt))
            out[t, head] = S.T @ qt
    z = (h @ w.get(b + "attn_gate.weight").T).reshape(T, n_v, d)
    y = rmsnorm(out, w.get(b + "ssm_norm.weight"), eps) * silu(z)
    return y.reshape(T, n_v * d) @ w.get(b + "ssm_out.weight").T


def attention(q, k, v, n_heads, n_kv, head_dim, mask):
    group = n_heads // n_kv
    out = np.empty((q.shape[0], n_heads, head_dim))
    for hq in range(n_heads):
        hk = hq // group
        scores = q[:, hq, :] @ k[:, hk, :].T / np.sqrt(head_dim) + mask
        scores = np.exp(scores - scores.max(axis=1, keepdims=True))
        scores /= scores.sum(axis=1, keepdims=True)
        out[:, hq, :] = scores @ v[:, hk, :]
    return out


def forward_qwen35(w, tokens, rows=None):
    p = "qwen35."
    fields = w.reader.fields
    n_layers = int(w.field(p + "block_count"))
    n_heads = int(w.field(p + "attention.head_count"))
    n_kv = int(w.field(p + "attention.head_count_kv"))
    head_dim = int(w.field(p + "attention.key_length"))
    rope_dims = int(w.field(p + "rope.dimension_count"))
    theta = float(w.field(p + "rope.freq_base"))
    eps = float(w.field(p + "attention.layer_norm_rms_epsilon"))
    ssm = tuple(int(w.field(p + "ssm." + key)) for key in ("conv_kernel", "state_size", "group_count", "time_step_rank"))
    if (p + "attention.recurrent_layers") in fields:
        recurrent = [bool(f) for f in w.field(p + "attention.recurrent_layers")]
    else:
        interval = int(w.field(p + "full_attention_interval")) if (p + "full_attention_interval") in fields else 4
        recurrent = [(l + 1) % interval != 0 for l in range(n_layers)]
    emb = w.get("token_embd.weight")
    T = len(tokens)
    pos = np.arange(T)
    x = emb[np.array(tokens)]
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    for layer in range(n_layers):
        b = f"blk.{layer}."
        h = rmsnorm(x, w.get(b + "attn_norm.weight"), eps)
        if recurrent[layer]:
            x = x + delta_net(w, b, h, eps, ssm)
        else:
            qg = (h @ w.get(b + "attn_q.weight").T).reshape(T, n_heads, 2 * head_dim)
            q, gate = qg[..., :head_dim], qg[..., head_dim:].reshape(T, n_heads * head_dim)
            k = (h @ w.get(b + "attn_k.weight").T).reshape(T, n_kv, head_dim)
            v = (h @ w.get(b + "attn_v.weight").T).reshape(T, n_kv, head_dim)
            q = rope(rmsnorm(q, w.get(b + "attn_q_norm.weight"), eps), pos, theta, rope_dims, True)
            k = rope(rmsnorm(k, w.get(b + "attn_k_norm.weight"), eps), pos, theta, rope_dims, True)
            k = k.astype(np.float16).astype(np.float64)  # the KV's f16 rows, as for the other architectures
            v = v.astype(np.float16).astype(np.float64)
            out = attention(q, k, v, n_heads, n_kv, head_dim, causal).reshape(T, n_heads * head_dim)
            x = x + (out * sigmoid(gate)) @ w.get(b + "attn_output.weight").T
        h = rmsnorm(x, w.get(b + "post_attention_norm.weight"), eps)
        f = (silu(h @ w.get(b + "ffn_gate.weight").T) * (h @ w.get(b + "ffn_up.weight").T)) @ w.get(b + "ffn_down.weight").T
        x = x + f
    x = rmsnorm(x, w.get("output_norm.weight"), eps)
    out_w = w.get("output.weight") if w.has("output.weight") else emb
    return (x if rows is None else x[rows]) @ out_w.T


def forward(w, tokens, rows=None):
    arch = bytes(w.field("general.architecture")).decode()
    if arch == "qwen35":
        return forward_qwen35(w, tokens, rows)
    assert arch in ("llama", "qwen2", "qwen3", "gemma3"), arch
    p = arch + "."

    def opt(key, default):
        return w.field(p + key) if (p + key) in w.reader.fields else default

    n_layers = int(w.field(p + "block_count"))
    n_heads = int(w.field(p + "attention.head_count"))
    n_kv = int(opt("attention.head_count_kv", n_heads))
    eps = float(opt("attention.layer_norm_rms_epsilon", 1e-5))
    theta = float(opt("rope.freq_base", 10000.0))
    emb = w.get("token_embd.weight")  # [vocab, embedding]
    d_model = emb.shape[1]
    head_dim = int(opt("attention.key_length", d_model // n_heads))
    rope_dims = int(opt("rope.dimension_count", head_dim))
    neox = arch != "llama"
    freq_scale = 1.0
    if bytes(opt("rope.scaling.type", b"none")).decode() == "linear":
        freq_scale = 1.0 / float(opt("rope.scaling.factor", 1.0))
    factors = w.get("rope_freqs.weight") if w.has("rope_freqs.weight") else None
    window = int(opt("attention.sliding_window", 0))
    local = [window > 0] * n_layers  # llama: a window, where set, on every layer
    local_theta = theta
    if arch == "gemma3":
        pattern = opt("attention.sliding_window_pattern", 6)
        if np.ndim(pattern) == 0:
            local = [l % int(pattern) < int(pattern) - 1 for l in range(n_layers)]
        else:
            local = [bool(v) for v in pattern]
        local_theta = float(opt("rope.freq_base_swa", 10000.0))
    group = n_heads // n_kv
    T = len(tokens)
    pos = np.arange(T)
    x = emb[np.array(tokens)]
    if arch == "gemma3":
        x = x * np.sqrt(np.float32(d_model))
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    windowed = causal + np.tril(np.full((T, T), -np.inf), k=-window) if window > 0 else causal
    for layer in range(n_layers):
        b = f"blk.{layer}."
        h = rmsnorm(x, w.get(b + "attn_norm.weight"), eps)
        q = h @ w.get(b + "attn_q.weight").T
        k = h @ w.get(b + "attn_k.weight").T
        v = h @ w.get(b + "attn_v.weight").T
        if arch == "qwen2":
            q, k, v = q + w.get(b + "attn_q.bias"), k + w.get(b + "attn_k.bias"), v + w.get(b + "attn_v.bias")
        q = q.reshape(T, n_heads, head_dim)
        k = k.reshape(T, n_kv, head_dim)
        v = v.reshape(T, n_kv, head_dim)
        if arch in ("qwen3", "gemma3"):
            q = rmsnorm(q, w.get(b + "attn_q_norm.weight"), eps)
            k = rmsnorm(k, w.get(b + "attn_k_norm.weight"), eps)
        if local[layer] and arch == "gemma3":
            q = rope(q, pos, local_theta, rope_dims, neox)
            k = rope(k, pos, local_theta, rope_dims, neox)
        else:
            q = rope(q, pos, theta, rope_dims, neox, freq_scale, factors)
            k = rope(k, pos, theta, rope_dims, neox, freq_scale, factors)
        # The engine stores K and V as f16: round them the same way (a property
        # of the storage format, not of the engine's code).
        k = k.astype(np.float16).astype(np.float64)
        v = v.astype(np.float16).astype(np.float64)
        mask = windowed if local[layer] else causal
        out = np.empty((T, n_heads, head_dim))
        for hq in range(n_heads):
            hk = hq // group
            scores = q[:, hq, :] @ k[:, hk, :].T / np.sqrt(head_dim) + mask
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
            out[:, hq, :] = scores @ v[:, hk, :]
        o = out.reshape(T, n_heads * head_dim) @ w.get(b + "attn_output.weight").T
        if arch == "gemma3":
            o = rmsnorm(o, w.get(b + "post_attention_norm.weight"), eps)
        x = x + o
        h = rmsnorm(x, w.get(b + "ffn_norm.weight"), eps)
        g = h @ w.get(b + "ffn_gate.weight").T
        u = h @ w.get(b + "ffn_up.weight").T
        act = gelu_tanh(g) if arch == "gemma3" else g / (1.0 + np.exp(-g))
        f = (act * u) @ w.get(b + "ffn_down.weight").T
        if arch == "gemma3":
            f = rmsnorm(f, w.get(b + "post_ffw_norm.weight"), eps)
        x = x + f
    x = rmsnorm(x, w.get("output_norm.weight"), eps)
    out_w = w.get("output.weight") if w.has("output.weight") else emb
    return (x if rows is None else x[rows]) @ out_w.T  # [T or len(rows), vocab]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True)
    ap.add_argument("--positions", default="last", help="last, all, or comma-separated positions (their rows in order)")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    rows = None if args.positions in ("last", "all") else [int(p) for p in args.positions.split(",")]
    logits = forward(Weights(args.model), tokens, rows)
    if args.positions == "last":
        logits = logits[-1]
    logits.astype("<f4").tofile(args.out)
    top = np.argsort(logits.reshape(-1, logits.shape[-1])[-1])[::-1][:5]
    print("top tokens:", list(map(int, top)))


if __name__ == "__main__":
    main()
