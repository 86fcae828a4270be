"""serve_tier_test.py — two `activekv serve` processes sharing one Redis (the KV tier, docs/TIER.md).

A conversation's first turn runs on server A; its follow-up on server B, which
never saw it, reports cached tokens restored from the tier and gives the same
greedy output as server C, which has no tier. Then faults: the store flushed,
a value corrupted by hand, the store stalled past the timeout, the store
killed: every follow-up still completes with C's output, and B's counters show
each event. Starts its own redis-server on a free loopback port and stops it.

usage: serve_tier_test.py path/to/activekv
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serve_harness import Server, binary_from_argv  # noqa: E402


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_cli(port, *args):
    # A RESP command over a plain socket (no client library needed).
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        s.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
        return s.recv(1 << 16)


def metric(server, name):
    status, _, body = server.request("GET", "/metrics")
    m = re.search(r"^activekv_%s (\S+)$" % name, body.decode(), re.M)
    return float(m.group(1)) if m else None


def complete(server, prompt, max_tokens=8):
    status, _, body = server.request("POST", "/v1/completions",
                                     {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    if status != 200:
        raise SystemExit(f"FAIL: status {status}: {body[:300]}")
    r = json.loads(body)
    return r["choices"][0]["text"], r["usage"]["prompt_tokens_details"]["cached_tokens"]


def main():
    binary = binary_from_argv(sys.argv)
    if shutil.which("redis-server") is None:
        print("SKIP: redis-server is not installed (scripts/install-deps.sh --test)")
        return
    tmp = tempfile.mkdtemp(prefix="akv-tier-")
    config = os.path.join(tmp, "tier.json")
    with open(config, "w") as f:
        json.dump({"host_pool": "360MiB", "device_pool": "24MiB", "page_tokens": 16, "tile_tokens": 1024, "tiles": 4,
                   "max_context": 8192, "max_seqs": 2, "step_tokens": 256, "prefill_chunk_tokens": 128, "threads": 2,
                   "stop_at_eos": False, "prefix_reuse": True}, f)
    port = free_port()
    redis_args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    redis = subprocess.Popen(redis_args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    servers = []
    try:
        for _ in range(100):
            try:
                if b"PONG" in redis_cli(port, "PING"):
                    break
            except OSError:
                time.sleep(0.05)
        tier = ["--config", config, "--kv-tier", f"redis://127.0.0.1:{port}"]
        a = Server(binary, tier)
        servers.append(a)
        b = Server(binary, tier)
        servers.append(b)
        c = Server(binary, ["--config", config])
        servers.append(c)

        # ~600 tokens: two whole 256-token blocks.
        first = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(45))
        text_a, cached_a = complete(a, first)
        check(cached_a == 0, "the first turn on A prefilled everything")
        time.sleep(0.5)  # write-behind
        stored = [k for k in redis_cli(port, "KEYS", "akv:*").split(b"\r\n") if k.startswith(b"akv:")]
        check(len(stored) >= 2, f"A wrote the first turn's blocks to the tier ({len(stored)} keys)")
        follow = first + text_a + " And then?"
        text_b, cached_b = complete(b, follow)
        text_c, cached_c = complete(c, follow)
        check(cached_b >= 512, f"B restored the first turn from the tier (cached_tokens {cached_b})")
        check(cached_c == 0, "C (no tier) prefilled everything")
        check(text_b == text_c, f"B's follow-up equals C's ({text_b!r} vs {text_c!r})")
        check(metric(b, "tier_hits_total") >= 2, "B counted the hits")

        def follow_up(tag):
            # A fresh conversation each time: never held locally by B or C.
            prompt = f"{tag}. " + first
            t1, _ = complete(a, prompt)
            time.sleep(0.5)
            f2 = prompt + t1 + " Go on."
            tb, cb = complete(b, f2)
            tc, _ = complete(c, f2)
            check(tb == tc, f"{tag}: B's output equals C's")
            return cb

        # Flushed: a miss, prefilled, same output.
        misses = metric(b, "tier_misses_total")
        prompt = "Flushed. " + first
        t1, _ = complete(a, prompt)
        time.sleep(0.5)
        redis_cli(port, "FLUSHALL")
        tb, cb = complete(b, prompt + t1 + " Go on.")
        tc, _ = complete(c, prompt + t1 + " Go on.")
        check(cb == 0 and tb == tc, "flushed: B prefilled and its output equals C's")
        check(metric(b, "tier_misses_total") > misses, "flushed: B counted a miss")

        # Corrupted by hand: every stored value gets one byte flipped in its payload.
        prompt = "Corrupted. " + first
        t1, _ = complete(a, prompt)
        time.sleep(0.5)
        keys = redis_cli(port, "KEYS", "akv:*").split(b"\r\n")
        keys = [k for k in keys if k.startswith(b"akv:")]
        for k in keys:
            redis_cli(port, "SETRANGE", k, 1000, "Z")
        refused = metric(b, "tier_refused_total")
        tb, cb = complete(b, prompt + t1 + " Go on.")
        tc, _ = complete(c, prompt + t1 + " Go on.")
        check(cb == 0 and tb == tc, "corrupted: B refused the blocks, prefilled, output equals C's")
        check(metric(b, "tier_refused_total") > refused, "corrupted: B counted the refusal")

        # Stalled past the timeout (SIGSTOP), then killed: misses, errors, same output.
        cached = follow_up("Before the stall")
        check(cached >= 512, "before the stall: restored from the tier")
        errors = metric(b, "tier_errors_total")
        redis.send_signal(signal.SIGSTOP)
        prompt = "Stalled. " + first
        tb, cb = complete(b, prompt + " Go on.")
        tc, _ = complete(c, prompt + " Go on.")
        check(tb == tc, "stalled: B's request completed with C's output")
        check(metric(b, "tier_errors_total") > errors, "stalled: B counted an error")
        redis.send_signal(signal.SIGCONT)
        redis.kill()
        redis.wait()
        prompt = "Killed. " + first
        tb, cb = complete(b, prompt + " Go on.")
        tc, _ = complete(c, prompt + " Go on.")
        check(cb == 0 and tb == tc, "killed: B prefilled and its output equals C's")
        print(f"B: hits {metric(b, 'tier_hits_total')}, misses {metric(b, 'tier_misses_total')}, "
              f"errors {metric(b, 'tier_errors_total')}, refused {metric(b, 'tier_refused_total')}, "
              f"bytes read {metric(b, 'tier_bytes_read_total')}, dropped writes {metric(b, 'tier_dropped_writes_total')}")
    finally:
        for s in servers:
            s.stop()
        if redis.poll() is None:
            redis.send_signal(signal.SIGCONT)
            redis.kill()
            redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
