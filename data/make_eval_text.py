#!/usr/bin/env python3
"""Cuts the evaluation text for `activekv eval` out of The Devil's Dictionary, once.

data/eval_text.txt is a contiguous run of whole entries of The Devil's Dictionary
(Ambrose Bierce, 1911; public domain, "A Public Domain Text, Copyright Expired",
from Debian's dict-devil package, converted by convert_devils_dictionary.py),
from the entry LABOR to the last entry that keeps it under CHARS characters: long
English prose, about 9,000 tokens with the SmolLM2 tokenizer, so an 8K-token
window and a few strides fit. It ships in the repository; nothing is downloaded.

    python3 data/make_eval_text.py            # writes data/eval_text.txt
"""
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE / "devils_dictionary.txt"
TARGET = HERE / "eval_text.txt"
FIRST_ENTRY = "LABOR, n."
CHARS = 37000


def main() -> int:
    text = SOURCE.read_text(encoding="utf-8")
    start = text.index("\n" + FIRST_ENTRY) + 1
    body = text[start:]
    # Entry boundaries: a blank line followed by an upper-case headword and a comma.
    ends = [m.start() for m in re.finditer(r"\n\n(?=[A-Z][A-Z' -]*, )", body)]
    cut = max(e for e in ends if e <= CHARS)
    TARGET.write_text(body[:cut].rstrip() + "\n", encoding="utf-8")
    print(f"wrote {TARGET} ({cut} characters)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
