#!/usr/bin/env python3
"""Tokenizer ids equal to an independent implementation's.

Builds a tokenizers.Tokenizer from the GGUF file's own vocabulary and merges
(read with the `gguf` package): models.BPE(vocab, merges), the SmolLM2
pre-tokenizer sequence (Digits(individual_digits=True), then ByteLevel with the
GPT-2 pattern), the ByteLevel decoder, and the control / user-defined tokens as
added special tokens. Then runs activekv_tokenize over the same strings — the
committed corpus plus seeded random strings — and compares ids exactly, and
decoded text, in both modes (special tokens allowed, and encoded as plain text).

Exits non-zero on any difference, and also when numpy, gguf or tokenizers are
missing: scripts/install-deps.sh --test installs them, so a missing package is a
broken test environment, never a reason to skip.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile


def fail(message):
    print(f"compare_with_hf: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import numpy  # noqa: F401  (the gguf package needs it)
    import gguf
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, AddedToken
except ImportError as e:
    fail(f"{e}; install the test packages with scripts/install-deps.sh --test")


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_ints(reader, key):
    f = reader.fields[key]
    return [int(f.parts[i][0]) for i in f.data]


def reference_tokenizers(model_path):
    reader = gguf.GGUFReader(model_path)
    pre = bytes(reader.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    if pre != "smollm":
        fail(f"the reference is built for tokenizer.ggml.pre = smollm, the file says {pre}")
    tokens = field_strings(reader, "tokenizer.ggml.tokens")
    types = field_ints(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in field_strings(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    # SmolLM2 has no token for 21 bytes; they become the file's unknown token.
    unk = None
    if "tokenizer.ggml.unknown_token_id" in reader.fields:
        unk = tokens[field_ints(reader, "tokenizer.ggml.unknown_token_id")[0]]
    specials = [AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False)
                for t, ty in zip(tokens, types) if ty in (3, 4)]

    def build(with_specials):
        tok = tokenizers.Tokenizer(models.BPE(vocab, merges, unk_token=unk, fuse_unk=False, byte_fallback=False))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
        tok.decoder = decoders.ByteLevel()
        if with_specials:
            tok.add_special_tokens(specials)
        return tok

    return build(True), build(False), len(specials), vocab.get(unk, -1)


def random_corpus(count, seed):
    rng = random.Random(seed)
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") + list("0123456789") * 2 +
                list(" " * 12) + ["\n", "\t", "\r\n", "  ", "   "] + list(".,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`") +
                ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S"] +
                list("éèàçüößñøåæœ") + list("中文日本語한국어") + list("Привет") + list("αβγδ") +
                ["\x04", "\x1d", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "\u00a0", "\u3000", "\u2009", "\u200b", "\u0301", "½", "²", "٣", "Ⅻ"] +
                ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "<repo_name>", "<file_sep>"] +
                [" the", " and", "ing", "tion", "def ", "return ", "int ", "{\n    "])
    out = []
    for _ in range(count):
        n = rng.randint(0, 40)
        out.append("".join(rng.choice(alphabet) for _ in range(n)))
    return out


def real_text_corpus(bytes_max, chunk_chars=4000):
    """Real code and prose: the running Python's standard library sources, in
    sorted file order, cut at line ends into chunks of about chunk_chars."""
    import glob
    import sysconfig
    out, total = [], 0
    for path in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines(keepends=True)
        chunk = ""
        for line in lines:
            chunk += line
            if len(chunk) >= chunk_chars:
                out.append(chunk)
                total += len(chunk)
                chunk = ""
        if chunk:
            out.append(chunk)
            total += len(chunk)
        if total >= bytes_max:
            break
    return out


def run_tool(tool, model, strings, mode):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for s in strings:
            f.write(json.dumps(s) + "\n")
        path = f.name
    try:
        out = subprocess.run([tool, "--model", model, "--corpus", path, "--special", mode],
                             capture_output=True, text=True, encoding="utf-8")
    finally:
        os.unlink(path)
    if out.returncode != 0:
        fail(f"{tool} exited {out.returncode}: {out.stderr.strip()}")
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    # The tool skips empty lines only; every string is one JSON line, so counts match.
    if len(rows) != len(strings):
        fail(f"{tool} returned {len(rows)} rows for {len(strings)} strings")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--find-model", required=True, help="scripts/find-model.sh")
    ap.add_argument("--model", help="overrides --find-model")
    ap.add_argument("--random", type=int, default=3000, help="random strings added to the corpus")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--real-text", type=int, default=300000,
                    help="characters of Python standard library source added to the corpus")
    args = ap.parse_args()

    model = args.model or os.environ.get("ACTIVEKV_MODEL")
    if not model:
        found = subprocess.run([args.find_model], capture_output=True, text=True)
        model = found.stdout.strip()
    if not model or not os.path.isfile(model):
        fail("the default model is not installed (scripts/install-deps.sh installs it)")

    with open(args.corpus, encoding="utf-8") as f:
        corpus = [json.loads(line) for line in f if line.strip()]
    real = real_text_corpus(args.real_text) if args.real_text > 0 else []
    strings = corpus + random_corpus(args.random, args.seed) + real

    with_specials, plain, special_count, unk_id = reference_tokenizers(model)
    mismatches = 0
    for mode, reference in (("allow", with_specials), ("plain", plain)):
        rows = run_tool(args.tool, model, strings, mode)
        expected = reference.encode_batch(strings, add_special_tokens=False)
        for s, row, enc in zip(strings, rows, expected):
            ref_ids = enc.ids
            ref_text = reference.decode(ref_ids, skip_special_tokens=False)
            if row["ids"] != ref_ids or row["decoded"] != ref_text:
                mismatches += 1
                if mismatches <= 10:
                    print(f"MISMATCH ({mode}) {json.dumps(s)}\n  ours: {row['ids']} {json.dumps(row['decoded'])}\n"
                          f"  ref:  {ref_ids} {json.dumps(ref_text)}", file=sys.stderr)
            if mode == "allow" and unk_id not in ref_ids and ref_text != s:
                fail(f"the reference does not round-trip {json.dumps(s)}")
    total = 2 * len(strings)
    tokens = sum(len(e.ids) for e in with_specials.encode_batch(strings, add_special_tokens=False))
    print(f"compare_with_hf: {len(strings)} strings ({len(corpus)} fixed, {args.random} random, seed {args.seed}, "
          f"{len(real)} chunks of standard library source), {tokens} tokens, {special_count} special tokens, "
          f"tokenizers {tokenizers.__version__}: "
          f"{total - mismatches}/{total} encodings equal")
    if mismatches:
        fail(f"{mismatches} of {total} encodings differ")


if __name__ == "__main__":
    main()
