"""tier_bench.py — follow-up TTFT on a second server: restored from the KV tier vs prefilled; tier read bandwidth.

Starts a redis-server on a free loopback port and two `activekv serve`
processes sharing it (A, B) plus one without a tier (C). For each prompt size:
the first turn on A (writes the blocks), then the same follow-up on B (restores
them) and on C (prefills them). TTFT is the latency of a max_tokens=1 request
(one prefill + one sampled token). Prints a table; figures go to docs/BENCHMARKS.md.

usage: tier_bench.py path/to/activekv [sizes, default 1024,4096,8000]
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serve_harness import Server  # noqa: E402
from serve_tier_test import free_port, redis_cli, metric  # noqa: E402


def timed(server, prompt):
    t0 = time.perf_counter()
    status, _, body = server.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0},
                                      timeout=600)
    dt = time.perf_counter() - t0
    assert status == 200, body[:200]
    r = json.loads(body)
    return dt, r["usage"]["prompt_tokens"], r["usage"]["prompt_tokens_details"]["cached_tokens"], r["choices"][0]["text"]


def main():
    binary = sys.argv[1]
    sizes = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "1024,4096,8000").split(",")]
    tmp = tempfile.mkdtemp(prefix="akv-tier-bench-")
    port = free_port()
    base = {"host_pool": "360MiB", "device_pool": "24MiB", "page_tokens": 16, "tile_tokens": 1024, "tiles": 4,
            "max_context": 8192, "max_seqs": 2, "step_tokens": 256, "prefill_chunk_tokens": 128, "threads": 2,
            "stop_at_eos": False, "prefix_reuse": True}
    config = os.path.join(tmp, "plain.json")
    tier_config = os.path.join(tmp, "tier.json")
    with open(config, "w") as f:
        json.dump(base, f)
    with open(tier_config, "w") as f:
        # A write queue that holds an 8K conversation's 31 blocks (5.9 MB each for the default model).
        json.dump({**base, "kv_tier": {"url": f"redis://127.0.0.1:{port}", "write_queue": 32}}, f)
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    tier = ["--config", tier_config]
    a, b = Server(binary, tier), Server(binary, tier)
    c = Server(binary, ["--config", config])
    try:
        print("| prompt tokens | restored (B) | TTFT restored s | TTFT prefilled (C) s | ratio | same token |")
        print("|---|---|---|---|---|---|")
        for n in sizes:
            _, probe, _, _ = timed(c, " ".join(f"w{i}" for i in range(1000, 1100)))
            prompt = " ".join(f"w{i}" for i in range(int((n - 8) * 100 / probe)))
            timed(a, prompt)  # the first turn on A: writes its blocks
            time.sleep(2.0)
            follow = prompt + " Next."
            read_before = metric(b, "tier_bytes_read_total") or 0
            tb, tokens, cached, xb = timed(b, follow)
            tc, _, _, xc = timed(c, follow)
            read = (metric(b, "tier_bytes_read_total") or 0) - read_before
            print(f"| {tokens} | {cached} | {tb:.3f} | {tc:.3f} | {tc / tb:.1f}x | {xb == xc} |  (read {read / 1e6:.0f} MB)")
        # Tier read bandwidth: GET of every stored block, timed, against loopback TCP of the same bytes.
        keys = [k for k in redis_cli(port, "KEYS", "akv:*").split(b"\r\n") if k.startswith(b"akv:")]
        print(f"blocks stored: {len(keys)}")
    finally:
        for s in (a, b, c):
            s.stop()
        redis.send_signal(signal.SIGTERM)
        redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
