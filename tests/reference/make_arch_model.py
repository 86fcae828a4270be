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
  legacy  attention Q5_0, FFN Q4_1, token_embd Q8_0 (output, where separate, Q5_1): with q8 and q4,
        every legacy format as a matrix product
  q4_k_m  as llama.cpp's Q4_K_M lays it out: attn_v and ffn_down Q6_K, the other matrices Q4_K,
        token_embd Q4_K (Q6_K when tied), output Q6_K. The `gguf` package cannot quantise
        K-quants, so these blocks are random bytes with their f16 scale fields chosen so that the
        matrix has the spread a normal draw would (every column count a multiple of 256:
        give --embedding 256 or more)

Variants (--variant) exercise the optional parts of each architecture:
  llama   plain | rope_freqs (Llama 3 factors, separate output) | window (Mistral-style, every layer)
          | linear (rope.scaling linear)
  qwen2   plain (QKV biases, separate output)
  qwen3   plain (per-head Q/K norms, key_length ≠ embedding / heads)
  gemma3  plain (6 layers: 5 window + 1 full, the default pattern) | pattern (a per-layer array)
  qwen35  plain (6 layers, full_attention_interval 3: Gated DeltaNet on 0, 1, 3, 4, gated attention
          on 2 and 5; partial rotary, M-RoPE sections) | flags (attention.recurrent_layers, 4 layers,
          attention on 0 and 3; 4 value heads over 2 key heads)
Hybrid options (qwen35): --layers N --interval N --embedding N --ffn N --heads N --kv-heads N
--head-dim N --rope-dims N (default half the head) --ssm-state N --ssm-groups N --ssm-v-heads N --vocab-from FILE.gguf (the
vocabulary, merges, special ids and chat template of a vocabulary-only GGUF, such as llama.cpp's
models/ggml-vocab-qwen35.gguf; token_embd then has its rows).

Sizes (--embedding, --ffn, --heads, --kv-heads, --head-dim, --layers, --context) default to the
small shapes the engine's tests use. --vocab-from VOCAB.gguf copies that file's tokenizer.* keys
(a real vocabulary, e.g. llama.cpp's models/ggml-vocab-*.gguf) and sizes the embeddings by it, so
that other implementations load the file too (scripts/peer-logits.sh); without it the file has
a 256-token vocabulary and no tokenizer.

Usage: make_arch_model.py --arch A --mix M [--variant V] --out FILE.gguf
Exit code 3 when numpy or gguf is missing.
"""
import argparse
import os
import pickle
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf import GGUFReader, GGUFValueType
except ImportError as exc:
    print(f"missing python package: {exc}", file=sys.stderr)
    sys.exit(3)

EMBEDDING, FFN, HEADS, KV_HEADS, VOCAB, CONTEXT = 64, 128, 4, 2, 256, 512

MIXES = {
    "f32": dict(attn=T.F32, ffn=T.F32, embd=T.F32, out=T.F32),
    "f16": dict(attn=T.F16, ffn=T.F16, embd=T.F16, out=T.F16),
    "q8": dict(attn=T.Q8_0, ffn=T.Q4_0, embd=T.Q8_0, out=T.Q8_0),
    "q4": dict(attn=T.Q4_0, ffn=T.Q8_0, embd=T.F16, out=T.Q4_0),
    "legacy": dict(attn=T.Q5_0, ffn=T.Q4_1, embd=T.Q8_0, out=T.Q5_1),
    "q4_k_m": dict(attn=T.Q4_K, ffn=T.Q4_K, embd=T.Q4_K, out=T.Q6_K, wide=T.Q6_K),
    "q5_k_m": dict(attn=T.Q5_K, ffn=T.Q5_K, embd=T.Q5_K, out=T.Q6_K, wide=T.Q6_K),
}

# K-quant blocks: byte offsets of their f16 scale fields and the ratio of the fields to each other
# (Q4_K's dmin = 7.5 d centres its sub-blocks: the mean 4-bit value is 7.5; Q5_K's 15.5, for 5 bits).
K_SCALES = {T.Q4_K: [(0, 1.0), (2, 7.5)], T.Q5_K: [(0, 1.0), (2, 15.5)], T.Q6_K: [(208, 1.0)]}


def random_kquant(rng, rows, cols, qtype, spread):
    """Random K-quant blocks whose dequantised values have standard deviation ≈ spread."""
    block_elements, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    assert cols % block_elements == 0, f"{cols} columns are not whole {qtype.name} blocks: use --embedding 256 or more"
    blocks = rows * cols // block_elements
    raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    jitter = 0.5 + rng.random(blocks)

    def set_scales(unit):
        for offset, ratio in K_SCALES[qtype]:
            raw[:, offset:offset + 2] = (unit * ratio * jitter).astype(np.float16).view(np.uint8).reshape(blocks, 2)

    set_scales(1e-3)
    measured = float(np.std(gguf.quants.dequantize(raw[: min(blocks, 64)], qtype)))
    set_scales(1e-3 * spread / measured)
    return raw.reshape(rows, cols // block_elements * block_bytes)


def add_matrix(w, rng, mix, name, rows, cols, qtype, scale):
    """A random rows × cols weight of qtype (a K-quant mix's wider type on attn_v and ffn_down)."""
    if "wide" in mix and name.endswith(("attn_v.weight", "ffn_down.weight")):
        qtype = mix["wide"]  # the K-quant mix's wider type, where llama.cpp's Q4_K_M puts it
    if qtype in K_SCALES:
        w.add_tensor(name, random_kquant(rng, rows, cols, qtype, scale), raw_dtype=qtype)
        return
    data = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    if qtype == T.F32:
        w.add_tensor(name, data)
    elif qtype == T.F16:
        w.add_tensor(name, data.astype(np.float16))
    else:
        w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def tokenizer_fields(path, cache_dir=None):
    """The tokenizer.* keys of `path` as (key, value, type, sub_type). GGUFReader takes a minute on
    a 150K-token vocabulary, so with `cache_dir` they are kept there as a pickle, by file name and size."""
    cached = None
    if cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
        cached = os.path.join(cache_dir, f"{os.path.basename(path)}.{os.path.getsize(path)}.tokenizer.pickle")
        if os.path.exists(cached):
            with open(cached, "rb") as f:
                return pickle.load(f)
    reader = GGUFReader(path)
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            array = field.types[0] == GGUFValueType.ARRAY
            fields.append((key, field.contents(), field.types[0], field.types[-1] if array else None))
    if cached:
        with open(cached + ".tmp", "wb") as f:
            pickle.dump(fields, f)
        os.replace(cached + ".tmp", cached)
    return fields


def copy_tokenizer(writer, path, cache_dir=None):
    """Copies the tokenizer.* keys of `path`; returns its token count."""
    tokens = 0
    for key, value, vtype, sub_type in tokenizer_fields(path, cache_dir):
        if sub_type is not None:
            writer.add_key_value(key, value, vtype, sub_type=sub_type)
        else:
            writer.add_key_value(key, value, vtype)
        if key == "tokenizer.ggml.tokens":
            tokens = len(value)
    return tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, choices=["llama", "qwen2", "qwen3", "gemma3", "qwen35"])
    ap.add_argument("--mix", required=True, choices=sorted(MIXES))
    ap.add_argument("--variant", default="plain")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--window", type=int, default=64, help="attention.sliding_window where the file has one")
    ap.add_argument("--embedding", type=int, default=EMBEDDING)
    ap.add_argument("--ffn", type=int, default=FFN)
    ap.add_argument("--heads", type=int, default=HEADS)
    ap.add_argument("--kv-heads", type=int, default=KV_HEADS)
    ap.add_argument("--head-dim", type=int, default=0, help="0: 32 for qwen3/gemma3 at the default sizes, else embedding / heads")
    ap.add_argument("--layers", type=int, default=0, help="0: 6 for gemma3 and qwen35 (4 with --variant flags), 2 otherwise")
    ap.add_argument("--context", type=int, default=CONTEXT)
    ap.add_argument("--vocab-from", default=None, help="copy this GGUF's tokenizer (a real vocabulary)")
    ap.add_argument("--vocab-cache", default=None, help="a folder where --vocab-from's keys are kept between runs")
    ap.add_argument("--interval", type=int, default=3, help="qwen35: full_attention_interval")
    ap.add_argument("--rope-dims", type=int, default=0, help="qwen35: rope.dimension_count (0: half of --head-dim)")
    ap.add_argument("--ssm-state", type=int, default=16, help="qwen35: ssm.state_size (each head's state is S × S)")
    ap.add_argument("--ssm-groups", type=int, default=2, help="qwen35: ssm.group_count, the key heads")
    ap.add_argument("--ssm-v-heads", type=int, default=0, help="qwen35: ssm.time_step_rank, the value heads "
                    "(0: 2, or 4 with --variant flags)")
    ap.add_argument("--malformed", default="", choices=["", "interval0", "state", "missing"],
                    help="qwen35: a broken file (full_attention_interval 0; ssm.state_size and ssm.inner_size "
                         "twice what the tensors hold; blk.0.ssm_a left out)")
    args = ap.parse_args()
    arch, variant, mix = args.arch, args.variant, MIXES[args.mix]
    if arch == "qwen35":
        write_qwen35(args, mix)
        return
    rng = np.random.default_rng(args.seed)
    EMB, HEADS_, KV_HEADS_ = args.embedding, args.heads, args.kv_heads

    layers = args.layers or (6 if arch == "gemma3" else 2)
    small = EMB == EMBEDDING and HEADS_ == HEADS
    head_dim = args.head_dim or (32 if arch in ("qwen3", "gemma3") and small else EMB // HEADS_)
    q_dim, kv_dim = HEADS_ * head_dim, KV_HEADS_ * head_dim
    tied = arch in ("gemma3",) or (arch == "llama" and variant in ("plain", "window"))

    w = gguf.GGUFWriter(args.out, arch)
    w.add_name(f"random {arch} {variant} {args.mix}")
    vocab = copy_tokenizer(w, args.vocab_from, args.vocab_cache) if args.vocab_from else VOCAB
    p = arch + "."
    w.add_uint32(p + "block_count", layers)
    w.add_uint32(p + "embedding_length", EMB)
    w.add_uint32(p + "feed_forward_length", args.ffn)
    w.add_uint32(p + "attention.head_count", HEADS_)
    w.add_uint32(p + "attention.head_count_kv", KV_HEADS_)
    w.add_uint32(p + "context_length", args.context)
    w.add_float32(p + "rope.freq_base", 1000000.0 if arch != "llama" else 10000.0)
    w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-6 if arch != "llama" else 1e-5)
    if head_dim != EMB // HEADS_:
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
        if "wide" in mix and tied and name == "token_embd.weight":
            qtype = mix["out"]  # tied: the embeddings are the output matrix too
        add_matrix(w, rng, mix, name, rows, cols, qtype, scale)

    def vector(name, n, mean, spread):
        w.add_tensor(name, (mean + spread * rng.standard_normal(n)).astype(np.float32))

    matrix("token_embd.weight", vocab, EMB, mix["embd"], 1.0)
    vector("output_norm.weight", EMB, 1.0, 0.1)
    if not tied:
        matrix("output.weight", vocab, EMB, mix["out"], 0.15)
    if arch == "llama" and variant == "rope_freqs":
        # Llama 3's factors: 1 for the fast frequencies, up to 8 for the slow ones.
        w.add_tensor("rope_freqs.weight", np.linspace(1.0, 8.0, head_dim // 2).astype(np.float32))
    a = 1.0 / np.sqrt(EMB)
    for l in range(layers):
        b = f"blk.{l}."
        vector(b + "attn_norm.weight", EMB, 1.0, 0.1)
        matrix(b + "attn_q.weight", q_dim, EMB, mix["attn"], 2.0 * a)
        matrix(b + "attn_k.weight", kv_dim, EMB, mix["attn"], 2.0 * a)
        matrix(b + "attn_v.weight", kv_dim, EMB, mix["attn"], a)
        matrix(b + "attn_output.weight", EMB, q_dim, mix["attn"], 1.0 / np.sqrt(q_dim))
        if arch == "qwen2":
            vector(b + "attn_q.bias", q_dim, 0.0, 0.2)
            vector(b + "attn_k.bias", kv_dim, 0.0, 0.2)
            vector(b + "attn_v.bias", kv_dim, 0.0, 0.2)
        if arch in ("qwen3", "gemma3"):
            vector(b + "attn_q_norm.weight", head_dim, 1.0, 0.2)
            vector(b + "attn_k_norm.weight", head_dim, 1.0, 0.2)
        if arch == "gemma3":
            vector(b + "post_attention_norm.weight", EMB, 1.0, 0.1)
            vector(b + "post_ffw_norm.weight", EMB, 1.0, 0.1)
        vector(b + "ffn_norm.weight", EMB, 1.0, 0.1)
        matrix(b + "ffn_gate.weight", args.ffn, EMB, mix["ffn"], a)
        matrix(b + "ffn_up.weight", args.ffn, EMB, mix["ffn"], a)
        matrix(b + "ffn_down.weight", EMB, args.ffn, mix["ffn"], 1.0 / np.sqrt(args.ffn))

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
    heads, kv_heads = args.heads, args.kv_heads
    head_dim = args.head_dim or 32
    rope_dims = args.rope_dims or head_dim // 2  # partial rotary, as Qwen3.5's 64 of 256
    # M-RoPE sections over rope_dims / 2 frequencies, interleaved (pair i to section i mod 3), so that
    # every pair falls in one of the three text sections (Qwen3.5: [11, 11, 10, 0] of 32)
    pairs = rope_dims // 2
    sections = [-(-pairs // 3), -(-(pairs - 1) // 3)]
    sections += [pairs - sum(sections), 0]
    conv_kernel, state, k_heads = 4, args.ssm_state, args.ssm_groups
    v_heads = args.ssm_v_heads or (4 if flags else 2)
    inner = v_heads * state
    conv_dim = 2 * k_heads * state + inner
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    ffn = args.ffn if args.ffn != FFN else 2 * embedding
    if flags:
        recurrent = [l % 3 != 0 for l in range(layers)]
    else:
        recurrent = [(l + 1) % args.interval != 0 for l in range(layers)]

    w = gguf.GGUFWriter(args.out, "qwen35")
    w.add_name(f"random qwen35 {args.variant} {args.mix}")
    p = "qwen35."
    w.add_uint32(p + "block_count", layers)
    w.add_uint32(p + "embedding_length", embedding)
    w.add_uint32(p + "feed_forward_length", ffn)
    w.add_uint32(p + "attention.head_count", heads)
    w.add_uint32(p + "attention.head_count_kv", kv_heads)
    w.add_uint32(p + "attention.key_length", head_dim)
    w.add_uint32(p + "attention.value_length", head_dim)
    w.add_uint32(p + "context_length", args.context if args.context != CONTEXT else 4096)
    w.add_float32(p + "rope.freq_base", 10000000.0)
    w.add_uint32(p + "rope.dimension_count", rope_dims)
    w.add_array(p + "rope.dimension_sections", sections)
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
        add_matrix(w, rng, mix, name, rows, cols, qtype, scale)

    def vector(name, n, mean, spread):
        w.add_tensor(name, (mean + spread * rng.standard_normal(n)).astype(np.float32))

    matrix("token_embd.weight", vocab, embedding, mix["embd"], 1.0)
    vector("output_norm.weight", embedding, 1.0, 0.1)
    matrix("output.weight", vocab, embedding, mix["out"], 0.15)
    a = 1.0 / np.sqrt(embedding)
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
