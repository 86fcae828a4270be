#!/usr/bin/env python3
"""Writes data/default_trace.jsonl: the workload `activekv run` uses by default.

Prompts are excerpts of The Devil's Dictionary (data/devils_dictionary.txt,
public domain) sized in tokens of the default model's tokenizer (byte-level BPE
rebuilt from the GGUF vocabulary and merges with the `tokenizers` package; if it
is unavailable, ~4 characters per token is assumed and the sizes are approximate).
Two sessions have follow-up turns: their prompt is the previous prompt + answer
+ the new text (the scheduler composes it at run time).

The trace is small on purpose: the default run must finish in a few minutes on a
2-core CPU with the 135M model. Sizes span the issue's range: prompts from 200
to 7,000 tokens, outputs from 16 to 256 tokens.

    python3 data/make_default_trace.py [model.gguf]
"""
import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
TEXT = (HERE / "devils_dictionary.txt").read_text(encoding="utf-8")

# (id, arrival_s, prompt tokens, max_tokens, session)
REQUESTS = [
    ("r01", 0.0, 320, 64, "a"),
    ("r02", 0.3, 1200, 32, None),
    ("r03", 0.6, 200, 128, None),
    ("r04", 1.0, 2400, 16, None),
    ("r05", 1.5, 600, 96, "b"),
    ("r06", 2.0, 7000, 16, None),
    ("r07", 2.5, None, 48, "a"),    # follow-up of r01
    ("r08", 3.0, 3600, 24, None),
    ("r09", 3.5, None, 32, "b"),    # follow-up of r05
    ("r10", 4.0, 900, 256, None),
]
FOLLOW_UPS = {
    "r07": "\n\nUser: Define PATIENCE in the same manner, in two sentences.\nDictionary:",
    "r09": "\n\nUser: Now write a short entry for the word COMPUTER, as Bierce might have.\nDictionary:",
}
INSTRUCTION = "The following are entries from The Devil's Dictionary by Ambrose Bierce.\n\n"
CONTINUE = "\n\nWrite the next entry in the same style:\n"


def tokenizer_counter(model_path):
    try:
        import gguf
        from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    except ImportError:
        return None
    reader = gguf.GGUFReader(model_path)

    def strings(name):
        field = reader.fields[name]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    return lambda text: len(tok.encode(text).ids)


def excerpt(start, tokens, count):
    """The shortest run of whole lines from `start` whose prompt has at least `tokens` tokens."""
    lines = TEXT.splitlines(keepends=True)
    lo, hi = start + 1, len(lines)
    def prompt(end):
        return INSTRUCTION + "".join(lines[start:end]).strip() + CONTINUE
    while lo < hi:  # binary search on the end line
        mid = (lo + hi) // 2
        if count(prompt(mid)) >= tokens:
            hi = mid
        else:
            lo = mid + 1
    return prompt(lo), lo


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else subprocess.run(
        [str(HERE.parent / "scripts" / "find-model.sh")], capture_output=True, text=True).stdout.strip()
    count = tokenizer_counter(model) if model else None
    exact = count is not None
    if count is None:
        count = lambda text: len(text) // 4
    lines_total = len(TEXT.splitlines())
    start = next(i for i, l in enumerate(TEXT.splitlines()) if l.startswith("ABASEMENT"))
    out = []
    for rid, arrival, tokens, max_tokens, session in REQUESTS:
        if tokens is None:
            prompt = FOLLOW_UPS[rid]
        else:
            prompt, end = excerpt(start, tokens, count)
            start = end if end < lines_total - 2000 else 0
        entry = {"id": rid, "arrival_s": arrival, "prompt": prompt, "max_tokens": max_tokens}
        if session:
            entry["session"] = session
        out.append(entry)
        print(f"{rid}: {count(prompt)} prompt tokens{'' if exact else ' (approx.)'}, max_tokens {max_tokens}"
              f"{', session ' + session if session else ''}", file=sys.stderr)
    with open(HERE / "default_trace.jsonl", "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in out))


if __name__ == "__main__":
    main()
