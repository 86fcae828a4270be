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
  qwen35  plain (6 layers, full_attention_interval 3: Gated DeltaNet on 0, 1, 3, 4, gated attention
          on 2 and 5; partial rotary, M-RoPE sections) | flags (attention.recurrent_layers, 4 layers,
          attention on 0 and 3; 4 value heads over 2 key heads)
Hybrid options (qwen35): --layers N --interval N --embedding N --vocab-from FILE.gguf (the
vocabulary, merges, special ids and chat template of a vocabulary-only GGUF, such as llama.cpp's
models/ggml-vocab-qwen35.gguf; token_embd then has its rows).

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

EMBEDDING, FFN, HEADS, KV_HEADS, VOCAB, CONTEXT = 64, 128, 4, 2, 256, 256

MIXES = {
    "f32": dict(attn=T.F32, ffn=T.F32, embd=T.F32, out=T.F32),
    "f16": dict(attn=T.F16, ffn=T.F16, embd=T.F16, out=T.F16),
    "q8": dict(attn=T.Q8_0, ffn=T.Q4_0, embd=T.Q8_0, out=T.Q8_0),
    "q4": dict(attn=T.Q4_0, ffn=T.Q8_0, embd=T.F16, out=T.Q4_0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, choices=["llama", "qwen2", "qwen3", "gemma3", "qwen35"])
    ap.add_argument("--mix", required=True, choices=sorted(MIXES))
    ap.add_argument("--variant", default="plain")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--window", type=int, default=64, help="attention.sliding_window where the file has one")
    ap.add_argument("--layers", type=int, default=0, help="qwen35: block_count")
    ap.add_argument("--interval", type=int, default=3, help="qwen35: full_attention_interval")
    ap.add_argument("--embedding", type=int, default=EMBEDDING, help="qwen35: embedding_length")
    ap.add_argument("--vocab-from", default="", help="qwen35: copy the vocabulary of this GGUF")
    ap.add_argument("--malformed", default="", choices=["", "interval0", "state", "missing"],
                    help="qwen35: a broken file (full_attention_interval 0; ssm.state_size and ssm.inner_size "
                         "twice what the tensors hold; blk.0.ssm_a left out)")
    args = ap.parse_args()
    arch, variant, mix = args.arch, args.variant, MIXES[args.mix]
    if arch == "qwen35":
        write_qwen35(args, mix)
        return
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


def copy_vocabulary(w, path):
    """The tokenizer.* keys of a vocabulary-only GGUF; returns its token count."""
    r = gguf.GGUFReader(path)
    count = 0
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            etype = f.types[1]
            if etype == gguf.GGUFValueType.STRING:
                values = [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
            else:
                values = [f.parts[i][0].item() for i in f.data]
            if key == "tokenizer.ggml.tokens":
                count = len(values)
            w.add_key_value(key, values, vtype, sub_type=etype)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_key_value(key, bytes(f.parts[f.data[0]]).decode("utf-8"), vtype)
        else:
            w.add_key_value(key, f.parts[f.data[0]][0].item(), vtype)
    return count


def write_qwen35(args, mix):
    """A Qwen3.5 hybrid as llama.cpp's converter lays it out (src/models/qwen35.cpp reads it)."""
    rng = np.random.default_rng(args.seed)
    flags = args.variant == "flags"
    layers = args.layers or (4 if flags else 6)
    embedding = args.embedding
    heads, kv_heads, head_dim, rope_dims = 4, 2, 32, 16
    conv_kernel, state, k_heads = 4, 16, 2
    v_heads = 4 if flags else 2
    inner = v_heads * state
    conv_dim = 2 * k_heads * state + inner
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    if flags:
        recurrent = [l % 3 != 0 for l in range(layers)]
    else:
        recurrent = [(l + 1) % args.interval != 0 for l in range(layers)]

    w = gguf.GGUFWriter(args.out, "qwen35")
    w.add_name(f"random qwen35 {args.variant} {args.mix}")
    p = "qwen35."
    w.add_uint32(p + "block_count", layers)
    w.add_uint32(p + "embedding_length", embedding)
    w.add_uint32(p + "feed_forward_length", 2 * embedding)
    w.add_uint32(p + "attention.head_count", heads)
    w.add_uint32(p + "attention.head_count_kv", kv_heads)
    w.add_uint32(p + "attention.key_length", head_dim)
    w.add_uint32(p + "attention.value_length", head_dim)
    w.add_uint32(p + "context_length", 4096)
    w.add_float32(p + "rope.freq_base", 10000000.0)
    w.add_uint32(p + "rope.dimension_count", rope_dims)
    w.add_array(p + "rope.dimension_sections", [3, 3, 2, 0])
    w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-6)
    told = 2 if args.malformed == "state" else 1  # metadata that contradicts the tensors
    w.add_uint32(p + "ssm.conv_kernel", conv_kernel)
    w.add_uint32(p + "ssm.state_size", state * told)
    w.add_uint32(p + "ssm.group_count", k_heads)
    w.add_uint32(p + "ssm.time_step_rank", v_heads)
    w.add_uint32(p + "ssm.inner_size", inner * told)
    if flags:
        w.add_array(p + "attention.recurrent_layers", recurrent)
    else:
        w.add_uint32(p + "full_attention_interval", 0 if args.malformed == "interval0" else args.interval)
    vocab = VOCAB
    if args.vocab_from:
        vocab = copy_vocabulary(w, args.vocab_from)

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

    matrix("token_embd.weight", vocab, embedding, mix["embd"], 1.0)
    vector("output_norm.weight", embedding, 1.0, 0.1)
    matrix("output.weight", vocab, embedding, mix["out"], 0.15)
    a = 1.0 / np.sqrt(embedding)
    ffn = 2 * embedding
    for l in range(layers):
        b = f"blk.{l}."
        vector(b + "attn_norm.weight", embedding, 1.0, 0.1)
        vector(b + "post_attention_norm.weight", embedding, 1.0, 0.1)
        if recurrent[l]:
            matrix(b + "attn_qkv.weight", conv_dim, embedding, mix["attn"], 2.0 * a)
            matrix(b + "attn_gate.weight", inner, embedding, mix["attn"], a)
            matrix(b + "ssm_beta.weight", v_heads, embedding, T.F32, a)
            matrix(b + "ssm_alpha.weight", v_heads, embedding, T.F32, a)
            matrix(b + "ssm_out.weight", embedding, inner, mix["attn"], 1.0 / np.sqrt(inner))
            # [conv_kernel, conv_dim] in ggml's order: numpy [conv_dim, conv_kernel].
            w.add_tensor(b + "ssm_conv1d.weight", (rng.standard_normal((conv_dim, conv_kernel)) * 0.5).astype(np.float32))
            vector(b + "ssm_dt.bias", v_heads, 0.0, 0.5)
            # -exp(A_log), A_log ~ log(U(1, 16)) as the published initialisation; decays from ~0.4 to ~1.
            if not (args.malformed == "missing" and l == 0):
                w.add_tensor(b + "ssm_a", (-np.exp(np.log(rng.uniform(1.0, 16.0, v_heads))) * 0.1).astype(np.float32))
            vector(b + "ssm_norm.weight", state, 1.0, 0.1)
        else:
            matrix(b + "attn_q.weight", 2 * q_dim, embedding, mix["attn"], 2.0 * a)
            matrix(b + "attn_k.weight", kv_dim, embedding, mix["attn"], 2.0 * a)
            matrix(b + "attn_v.weight", kv_dim, embedding, mix["attn"], a)
            matrix(b + "attn_output.weight", embedding, q_dim, mix["attn"], 1.0 / np.sqrt(q_dim))
            vector(b + "attn_q_norm.weight", head_dim, 1.0, 0.2)
            vector(b + "attn_k_norm.weight", head_dim, 1.0, 0.2)
        matrix(b + "ffn_gate.weight", ffn, embedding, mix["ffn"], a)
        matrix(b + "ffn_up.weight", ffn, embedding, mix["ffn"], a)
        matrix(b + "ffn_down.weight", embedding, ffn, mix["ffn"], 1.0 / np.sqrt(ffn))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
