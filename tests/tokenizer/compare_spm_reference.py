#!/usr/bin/env python3
"""SentencePiece ids equal the `sentencepiece` library's, split as llama.cpp splits.

Builds a sentencepiece BPE model from the GGUF file's own tokens, scores and
types (byte fallback on; the space prefix as tokenizer.ggml.add_space_prefix
says; spaces escaped to "▁"), cuts each text at user-defined tokens the way
llama.cpp does when special tokens are not parsed (longest token text first,
every occurrence), encodes each stretch with the library and compares with
activekv_tokenize --special user on the committed corpus, 100 chunks of the
running Python's standard library and 2,000 seeded random strings.

  compare_spm_reference.py --tool activekv_tokenize --corpus corpus.jsonl --model FILE.gguf

Exits non-zero on any difference, and when gguf, sentencepiece or protobuf are
missing (scripts/install-deps.sh --test installs them) or the file is absent.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import sysconfig
import tempfile


def fail(message):
    print(f"compare_spm_reference: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import gguf
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
except ImportError as e:
    fail(f"{e}; install the test packages with scripts/install-deps.sh --test")


def reference_model(fields):
    def strs(k):
        return [bytes(fields[k].parts[i]).decode("utf-8", "surrogateescape") for i in fields[k].data]

    def nums(k):
        return [fields[k].parts[i][0].item() for i in fields[k].data]

    def scalar(k, default):
        return fields[k].parts[fields[k].data[0]][0].item() if k in fields else default

    toks, scores, types = strs("tokenizer.ggml.tokens"), nums("tokenizer.ggml.scores"), nums("tokenizer.ggml.token_type")
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(toks)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id = scalar("tokenizer.ggml.unknown_token_id", 0)
    m.trainer_spec.bos_id = scalar("tokenizer.ggml.bos_token_id", 1)
    m.trainer_spec.eos_id = scalar("tokenizer.ggml.eos_token_id", 2)
    m.trainer_spec.pad_id = scalar("tokenizer.ggml.padding_token_id", -1)
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = bool(scalar("tokenizer.ggml.add_space_prefix", True))
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(toks, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, ty
    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    user = sorted([i for i, ty in enumerate(types) if ty == 4 and toks[i]], key=lambda i: -len(toks[i].encode("utf-8")))
    return sp, toks, user


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        fail(f"{args.model} not found (scripts/install-deps.sh --test installs the vocabulary files)")
    sp, toks, user = reference_model(gguf.GGUFReader(args.model).fields)

    def reference(text):
        frags = [text]
        for i in user:  # llama.cpp's tokenizer_st_partition, special tokens not parsed
            nxt = []
            for fr in frags:
                if isinstance(fr, int):
                    nxt.append(fr)
                    continue
                while (k := fr.find(toks[i])) >= 0:
                    if k:
                        nxt.append(fr[:k])
                    nxt.append(i)
                    fr = fr[k + len(toks[i]):]
                if fr:
                    nxt.append(fr)
            frags = nxt
        ids = []
        for fr in frags:
            ids += [fr] if isinstance(fr, int) else sp.encode(fr)
        return ids

    texts = [json.loads(line) for line in open(args.corpus, encoding="utf-8")]
    stdlib = sorted(glob.glob(sysconfig.get_paths()["stdlib"] + "/*.py"))[:40]
    src = "".join(open(p, encoding="utf-8").read() for p in stdlib)
    texts += [src[i:i + 3000] for i in range(0, min(len(src), 300000), 3000)]
    rng = random.Random(5)
    alphabet = "ab cd  \n\t.,'1234567890éü中文🦙<>_-"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(2000)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as o:
        for t in texts:
            o.write(json.dumps(t) + "\n")
        corpus = o.name
    run = subprocess.run([args.tool, "--model", args.model, "--corpus", corpus, "--special", "user"],
                         capture_output=True, text=True)
    os.unlink(corpus)
    if run.returncode != 0:
        fail(f"activekv_tokenize exited {run.returncode}: {run.stderr}")
    lines = run.stdout.splitlines()
    if len(lines) != len(texts):
        fail(f"{len(lines)} results for {len(texts)} texts")
    equal, tokens, bad = 0, 0, []
    for t, line in zip(texts, lines):
        ours, ref = json.loads(line)["ids"], reference(t)
        tokens += len(ref)
        if ours == ref:
            equal += 1
        elif len(bad) < 5:
            bad.append(f"{t[:60]!r}: ActiveKV {ours[:12]} reference {ref[:12]}")
    print(f"compare_spm_reference: {os.path.basename(args.model)}: {equal} / {len(texts)} encodings equal "
          f"({tokens} reference tokens)")
    if equal != len(texts):
        for b in bad:
            print(b, file=sys.stderr)
        fail(f"{len(texts) - equal} encodings differ")


if __name__ == "__main__":
    main()
