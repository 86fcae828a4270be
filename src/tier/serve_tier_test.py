"""serve_tier_test.py — two `activekv serve` processes sharing one Redis (the KV tier, docs/TIER.md).

A conversation's first turn runs on server A; its follow-up on server B, which
never saw it, reports cached tokens restored from the tier and gives the same
greedy output as server C, which has no tier. B keeps no local prefix, so it
asks the tier for the same follow-up again after each fault the issue names
(the test re-plants A's blocks between them): the store flushed, a value
corrupted by hand, a value from another model and one of another geometry
planted under matching keys, the store stalled past the timeout (SIGSTOP),
killed in the middle of a request, and restarted: every request completes
with C's output, and B's counters show each event. Starts its own
redis-server on a free loopback port and stops it.

The quick version (the suite, about 10 s on 2 cores) uses 32-token tier blocks
and prompts of a few blocks; --long uses the default 256-token blocks and
~600-token prompts (scripts/tier-check.sh).

usage: serve_tier_test.py path/to/activekv [--long]
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serve_harness import Server, binary_from_argv  # noqa: E402


_t0 = time.time()


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok ({time.time() - _t0:.1f} s): {what}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_cli(port, *args):
    # A RESP command over a plain socket (no client library needed); the whole reply for small ones.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        s.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
        return s.recv(1 << 16)


def tier_keys(port):
    return [k for k in redis_cli(port, "KEYS", "akv:*").split(b"\r\n") if k.startswith(b"akv:")]


def metric(server, name):
    status, _, body = server.request("GET", "/metrics")
    m = re.search(r"^activekv_%s (\S+)$" % name, body.decode(), re.M)
    return float(m.group(1)) if m else None


def complete(server, prompt, max_tokens=4):
    status, _, body = server.request("POST", "/v1/completions",
                                     {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    if status != 200:
        raise SystemExit(f"FAIL: status {status}: {body[:300]}")
    r = json.loads(body)
    return r["choices"][0]["text"], r["usage"]["prompt_tokens_details"]["cached_tokens"]


class Redis:
    """A private redis-server on a fixed loopback port (so a restart comes back where it was)."""

    def __init__(self, port):
        self.port = port
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                if b"PONG" in redis_cli(self.port, "PING"):
                    return
            except OSError:
                time.sleep(0.025)
        raise SystemExit("FAIL: redis-server did not start")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def wait_for_writes(port, at_least, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(tier_keys(port)) >= at_least:
            return
        time.sleep(0.05)


def _reply(f):
    line = f.readline()
    if line.startswith(b"$"):
        n = int(line[1:-2])
        return None if n < 0 else f.read(n + 2)[:-2]
    return line


def redis_get(port, key):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
        return _reply(s.makefile("rb"))


def redis_set(port, key, value):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value))
        return _reply(s.makefile("rb"))


def main():
    binary = binary_from_argv(sys.argv)
    long_run = "--long" in sys.argv[2:]
    if shutil.which("redis-server") is None:
        print("SKIP: redis-server is not installed (scripts/install-deps.sh --test)")
        return
    block = 256 if long_run else 16
    lines = 45 if long_run else 4   # ~600 tokens (two 256-token blocks), or ~55 tokens (three 16-token blocks)
    max_tokens = 8 if long_run else 3
    tmp = tempfile.mkdtemp(prefix="akv-tier-")
    base = {"host_pool": "360MiB" if long_run else "64MiB", "device_pool": "24MiB", "page_tokens": 16,
            "tile_tokens": 1024 if long_run else 256, "tiles": 4, "max_context": 8192 if long_run else 1024,
            "max_seqs": 2, "step_tokens": 256, "prefill_chunk_tokens": 128, "threads": 2, "stop_at_eos": False,
            "prefix_reuse": True}
    port = free_port()
    plain, tiered, tier_only = (os.path.join(tmp, n) for n in ("plain.json", "tier.json", "tier_only.json"))
    tier = {"url": f"redis://127.0.0.1:{port}", "block_tokens": block, "timeout_ms": 300, "write_queue": 8}
    with open(plain, "w") as f:
        json.dump(base, f)
    with open(tiered, "w") as f:
        json.dump({**base, "kv_tier": tier}, f)
    with open(tier_only, "w") as f:
        # B keeps no local prefix: each of its requests for the same follow-up asks the tier again.
        json.dump({**base, "prefix_reuse": False, "kv_tier": tier}, f)
    redis = Redis(port)
    servers = []
    try:
        print(f"starting servers ({time.time() - _t0:.1f} s)", flush=True)
        a = Server(binary, ["--config", tiered])
        servers.append(a)
        b = Server(binary, ["--config", tier_only])
        servers.append(b)
        c = Server(binary, ["--config", plain])
        servers.append(c)

        first = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(lines))
        text_a, cached_a = complete(a, first, max_tokens)
        check(cached_a == 0, "the first turn on A prefilled everything")
        wait_for_writes(port, 2)
        good = {k: redis_get(port, k) for k in tier_keys(port)}
        check(len(good) >= 2, f"A wrote the first turn's blocks to the tier ({len(good)} keys)")
        follow = first + text_a + " And then?"
        text_b, cached_b = complete(b, follow, max_tokens)
        text_c, cached_c = complete(c, follow, max_tokens)
        check(cached_b >= 2 * block, f"B restored the first turn from the tier (cached_tokens {cached_b})")
        check(cached_c == 0, "C (no tier) prefilled everything")
        check(text_b == text_c, f"B's follow-up is bit-identical to C's ({text_b!r} vs {text_c!r})")
        check(metric(b, "tier_hits_total") >= 2, "B counted the hits")

        def replant():
            # The store holds exactly A's good blocks again (B's own writes removed).
            redis_cli(port, "FLUSHALL")
            for k, v in good.items():
                redis_set(port, k, v)

        def on_b(what):
            tb, cb = complete(b, follow, max_tokens)
            check(tb == text_c, f"{what}: B's output equals C's")
            return cb

        replant()
        check(on_b("replanted") >= 2 * block, "replanted: B restored again")

        # Flushed: a miss, prefilled, same output.
        misses = metric(b, "tier_misses_total")
        redis_cli(port, "FLUSHALL")
        check(on_b("flushed") == 0, "flushed: B prefilled")
        check(metric(b, "tier_misses_total") > misses, "flushed: B counted a miss")

        # Corrupted by hand, then planted from another model and another geometry: each value is
        # refused by its checksum or header, counted, never used.
        for tag, offset, data in (("corrupted", 1000, b"Z"),                           # a payload byte
                                  ("another model", 8, struct.pack("<Q", 0x5eed5eed)),  # header: model identity
                                  ("another geometry", 20, struct.pack("<I", 9))):      # header: KV heads
            replant()
            for k in good:
                redis_cli(port, "SETRANGE", k, offset, data)
            refused = metric(b, "tier_refused_total")
            check(on_b(tag) == 0, f"{tag}: B refused the blocks and prefilled")
            check(metric(b, "tier_refused_total") > refused, f"{tag}: B counted the refusal")

        # Stalled past the timeout (SIGSTOP): B's lookup runs into it on the reader thread; the
        # request completes (prefilled) with C's output.
        replant()
        errors = metric(b, "tier_errors_total")
        redis.proc.send_signal(signal.SIGSTOP)
        check(on_b("stalled") == 0, "stalled: B prefilled")
        check(metric(b, "tier_errors_total") > errors, "stalled: B counted an error")
        redis.proc.send_signal(signal.SIGCONT)
        time.sleep(0.3)  # past B's back-off
        check(on_b("resumed") >= 2 * block, "resumed: B restored again")

        # Killed in the middle of a request on B (its lookup, prefill or write-behind in flight).
        result = {}
        worker = threading.Thread(target=lambda: result.update(out=complete(b, follow, max_tokens)))
        worker.start()
        time.sleep(0.01)
        redis.kill()
        worker.join(timeout=120)
        check("out" in result and result["out"][0] == text_c, "killed mid-request: B's request completed with C's output")
        check(on_b("store down") == 0, "store down: B prefilled")

        # Restarted (empty, same port, A's blocks planted again): B reconnects after its back-off.
        redis.start()
        replant()
        cached = 0
        for attempt in range(10):
            time.sleep(0.2 * (attempt + 1))
            cached = on_b(f"restarted ({attempt})")
            if cached >= 2 * block:
                break
        check(cached >= 2 * block, f"restarted: B restored from the tier again (cached_tokens {cached})")
        for name, server in (("A", a), ("B", b)):
            allocs = metric(server, "heap_allocations_after_warmup")
            check(allocs == 0, f"{name}: no heap allocation on the engine thread's step path ({allocs})")
        print(f"B: hits {metric(b, 'tier_hits_total')}, misses {metric(b, 'tier_misses_total')}, "
              f"errors {metric(b, 'tier_errors_total')}, refused {metric(b, 'tier_refused_total')}, "
              f"bytes read {metric(b, 'tier_bytes_read_total')}, dropped writes {metric(b, 'tier_dropped_writes_total')}")
    finally:
        for s in servers:
            s.stop()
        redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
