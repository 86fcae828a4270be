#!/usr/bin/env python3
"""tiny_model.py — writes a tiny, valid Llama GGUF with random weights, and
malformed variants of it, for the hostile-input suite and the model fuzzer's seeds.

The model: 2 layers, embedding 32, 2 query heads and 1 KV head of 16, FFN 64,
F32 weights, context 256, and a byte-level BPE vocabulary of 256 byte tokens
plus "he" (one merge, "h e") and <|im_start|>, <|im_end|>, <|endoftext|> (260 tokens) with a
ChatML template — enough for `generate`, `generate --chat` and `run` to load it.

write(path, meta=..., drop=..., shapes=..., alignment=..., vocab_rows=...):
  meta      {key: value} replaces (or adds) metadata; value is an int (u32),
            a float (f32), a str, or a (GGUFValueType, value) pair
  drop      metadata keys or tensor names left out
  shapes    {tensor name: numpy shape} replaces a tensor's shape
  alignment general.alignment (default: none written, i.e. 32)
  tokens    how many vocabulary entries to write (default all 260)

Usage: tiny_model.py OUT.gguf [--seed-corpus DIR]  (DIR: raw seeds for the fuzzer)
"""
import os
import sys

import numpy as np
from gguf import GGUFValueType, GGUFWriter

LAYERS, EMBED, HEADS, KV_HEADS, FFN, CONTEXT = 2, 32, 2, 1, 64, 256
HEAD_DIM = EMBED // HEADS
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def byte_tokens():
    """GPT-2's byte-to-unicode table: the 256 byte-level token texts in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


TOKENS = byte_tokens() + ["he", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
MERGES = ["h e"]


def tensors(rng, vocab_rows):
    def m(rows, cols):
        return (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)

    out = {"token_embd.weight": m(vocab_rows, EMBED), "output_norm.weight": np.ones(EMBED, dtype=np.float32)}
    for l in range(LAYERS):
        b = f"blk.{l}."
        out[b + "attn_norm.weight"] = np.ones(EMBED, dtype=np.float32)
        out[b + "ffn_norm.weight"] = np.ones(EMBED, dtype=np.float32)
        out[b + "attn_q.weight"] = m(HEADS * HEAD_DIM, EMBED)
        out[b + "attn_k.weight"] = m(KV_HEADS * HEAD_DIM, EMBED)
        out[b + "attn_v.weight"] = m(KV_HEADS * HEAD_DIM, EMBED)
        out[b + "attn_output.weight"] = m(EMBED, HEADS * HEAD_DIM)
        out[b + "ffn_gate.weight"] = m(FFN, EMBED)
        out[b + "ffn_up.weight"] = m(FFN, EMBED)
        out[b + "ffn_down.weight"] = m(EMBED, FFN)
    return out


def write(path, meta=None, drop=(), shapes=None, alignment=None, tokens=None, vocab_rows=None, seed=1):
    meta = dict(meta or {})
    shapes = dict(shapes or {})
    rng = np.random.default_rng(seed)
    n_tokens = len(TOKENS) if tokens is None else tokens
    rows = len(TOKENS) if vocab_rows is None else vocab_rows
    w = GGUFWriter(path, "llama")
    base = {
        "general.name": "tiny-random",
        "llama.block_count": LAYERS,
        "llama.context_length": CONTEXT,
        "llama.embedding_length": EMBED,
        "llama.feed_forward_length": FFN,
        "llama.attention.head_count": HEADS,
        "llama.attention.head_count_kv": KV_HEADS,
        "llama.rope.dimension_count": HEAD_DIM,
        "llama.rope.freq_base": 10000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.eos_token_id": len(TOKENS) - 1,
        "tokenizer.ggml.bos_token_id": len(TOKENS) - 1,
        "tokenizer.chat_template": CHATML,
    }
    if alignment is not None:
        base["general.alignment"] = alignment
    base.update(meta)
    for key, value in base.items():
        if key in drop or key == "general.architecture":
            continue
        if isinstance(value, tuple):
            w.add_key_value(key, value[1], value[0])
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            if value < 0:
                w.add_int32(key, value)
            elif value > 0xFFFFFFFF:
                w.add_uint64(key, value)
            else:
                w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_string(key, value)
    if "tokenizer.ggml.tokens" not in drop:
        w.add_token_list(TOKENS[:n_tokens] + [f"<extra_{i}>" for i in range(max(0, n_tokens - len(TOKENS)))])
        w.add_token_types([3 if t.startswith("<|") else 1 for t in TOKENS[:n_tokens]] +
                          [3] * max(0, n_tokens - len(TOKENS)))
    if "tokenizer.ggml.merges" not in drop:
        w.add_token_merges(MERGES)
    for name, data in tensors(rng, rows).items():
        if name in drop:
            continue
        if name in shapes:
            data = np.zeros(shapes[name], dtype=np.float32)
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main():
    out = sys.argv[1]
    write(out)
    if len(sys.argv) > 3 and sys.argv[2] == "--seed-corpus":
        d = sys.argv[3]
        os.makedirs(d, exist_ok=True)
        write(os.path.join(d, "tiny.gguf"))
        write(os.path.join(d, "tiny_align64.gguf"), alignment=64)
        write(os.path.join(d, "tiny_tied.gguf"))  # token_embd doubles as output (no output.weight)
    return 0


if __name__ == "__main__":
    sys.exit(main())
