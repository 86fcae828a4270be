#!/usr/bin/env python3
"""Converts Debian's dict-devil database into plain text, once.

The Devil's Dictionary (Ambrose Bierce, 1911) is in the public domain; Debian's
`dict-devil` package ships it as a dictzip'd dictd database. The dictd format
is the original text with a few "00-database-*" header records in front; this
script drops those records and writes the text unchanged otherwise, so the
default trace (make_default_trace.py) draws its prompts from prose that ships
in the repository.

    apt-get install dict-devil
    python3 data/convert_devils_dictionary.py            # writes data/devils_dictionary.txt
"""
import gzip
import pathlib
import sys

SOURCE = pathlib.Path("/usr/share/dictd/devil.dict.dz")
TARGET = pathlib.Path(__file__).resolve().parent / "devils_dictionary.txt"


def main() -> int:
    if not SOURCE.exists():
        print(f"{SOURCE} not found: install Debian's dict-devil package", file=sys.stderr)
        return 1
    lines = gzip.decompress(SOURCE.read_bytes()).decode("latin-1").splitlines()
    # The header records: "00-database-..." lines, each followed by its value line(s)
    # up to the next record; the text proper starts at the distribution notice.
    start = next(i for i, line in enumerate(lines) if "The original data was distributed" in line)
    text = "\n".join(line.rstrip() for line in lines[start:]).strip() + "\n"
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET} ({len(text)} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
