"""tier_bench.py — follow-up TTFT on a second server: restored from the KV tier vs prefilled; tier read bandwidth.

Starts a redis-server on a free loopback port and two `activekv serve`
processes sharing it (A, B) plus one without a tier (C). For each prompt size:
the first turn on A (writes the blocks), then the same follow-up on B (restores
them) and on C (prefills them). TTFT is the latency of a max_tokens=1 request
(one prefill + one sampled token). Prints a table; figures go to docs/BENCHMARKS.md.

usage: tier_bench.py path/to/activekv [sizes, default 1024,4096,7900]
       tier_bench.py --bandwidth      (the read bandwidth part alone, no model)
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
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serve_harness import Server  # noqa: E402
from serve_tier_test import free_port, redis_cli, metric  # noqa: E402


def timed(server, prompt):
    t0 = time.perf_counter()
    status, _, body = server.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0},
                                      timeout=1800)
    dt = time.perf_counter() - t0
    assert status == 200, body[:200]
    r = json.loads(body)
    return dt, r["usage"]["prompt_tokens"], r["usage"]["prompt_tokens_details"]["cached_tokens"], r["choices"][0]["text"]


def read_exact(sock, n, buf):
    view, got = memoryview(buf), 0
    while got < n:
        r = sock.recv_into(view[got:n])
        if r == 0:
            raise OSError("closed")
        got += r


def pipelined_get(port, keys):
    # Every GET in one write, every bulk reply read into one reused buffer.
    buf = bytearray(64 << 20)
    with socket.create_connection(("127.0.0.1", port)) as s:
        f = s.makefile("rb", buffering=0)
        t0 = time.perf_counter()
        s.sendall(b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k) for k in keys))
        total = 0
        for _ in keys:
            line = b""
            while not line.endswith(b"\r\n"):
                line += f.read(1)
            n = int(line[1:-2])
            if n > 0:
                read_exact(s, n + 2, buf)
                total += n
        return time.perf_counter() - t0, total


def loopback_copy(nbytes):
    # A plain TCP copy over 127.0.0.1: a sender thread, a receiver into one reused buffer.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    chunk = bytes(4 << 20)

    def send():
        conn, _ = server.accept()
        left = nbytes
        while left > 0:
            conn.sendall(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))
        conn.close()

    th = threading.Thread(target=send)
    th.start()
    buf = bytearray(4 << 20)
    with socket.create_connection(server.getsockname()) as s:
        t0 = time.perf_counter()
        got = 0
        while got < nbytes:
            r = s.recv_into(buf)
            if r == 0:
                break
            got += r
        dt = time.perf_counter() - t0
    th.join()
    server.close()
    return dt


def bandwidth_only(blocks=32, block_bytes=5_898_304):
    # Without servers: `blocks` values the size of a default-model block (256 tokens × 30 layers ×
    # 768 B + 64), then the same pipelined GET and loopback copy as after the TTFT table.
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        keys = [b"akv:bench:%d" % i for i in range(blocks)]
        value = os.urandom(block_bytes)
        with socket.create_connection(("127.0.0.1", port)) as s:
            f = s.makefile("rb", buffering=0)
            for k in keys:
                s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(k), k, len(value)) + value + b"\r\n")
                f.readline()
        get_s, got = [], 0
        for _ in range(5):
            t, got = pipelined_get(port, keys)
            get_s.append(t)
        copy_s = [loopback_copy(got) for _ in range(5)]
        g, l = sorted(get_s)[2], sorted(copy_s)[2]
        print(f"{blocks} values of {block_bytes / 1e6:.2f} MB: pipelined GET of all {got / 1e6:.0f} MB: {g:.3f} s = "
              f"{got / g / 1e9:.2f} GB/s; loopback TCP copy of the same bytes: {l:.3f} s = {got / l / 1e9:.2f} GB/s "
              f"(medians of 5; GET/loopback {g / l:.2f})")
    finally:
        redis.send_signal(signal.SIGTERM)
        redis.wait()


def main():
    if "--bandwidth" in sys.argv[1:]:
        bandwidth_only()
        return
    binary = sys.argv[1]
    sizes = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "1024,4096,7900").split(",")]
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
        _, probe, _, _ = timed(c, " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog."
                                           for i in range(1000, 1040)))
        per_line = probe / 40
        for n in sizes:
            # Lines of about the same token count each (probed once), a distinct number per line.
            # Its own first words per size: neither B nor C holds any of it locally from an earlier row.
            prompt = f"Size {n}. " + " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(
                int((n - 12) / per_line)))
            timed(a, prompt)  # the first turn on A: writes its blocks behind
            # Until A's write-behind has stored them (bytes written steady over 1 s), at most 60 s.
            last, steady, t0 = -1.0, 0, time.time()
            while steady < 2 and time.time() - t0 < 60:
                time.sleep(0.5)
                now = metric(a, "tier_bytes_written_total") or 0
                steady = steady + 1 if now == last and now > 0 else 0
                last = now
            follow = prompt + " Next."
            names = ("tier_bytes_read_total", "tier_hits_total", "tier_misses_total", "tier_errors_total",
                     "tier_refused_total")
            before = {n: metric(b, n) or 0 for n in names}
            tb, tokens, cached, xb = timed(b, follow)
            tc, _, _, xc = timed(c, follow)
            d = {n: (metric(b, n) or 0) - before[n] for n in names}
            print(f"| {tokens} | {cached} | {tb:.3f} | {tc:.3f} | {tc / tb:.1f}x | {xb == xc} |  (read "
                  f"{d['tier_bytes_read_total'] / 1e6:.0f} MB; B's blocks hit {d['tier_hits_total']}, misses "
                  f"{d['tier_misses_total']}, errors {d['tier_errors_total']}, refused {d['tier_refused_total']})",
                  flush=True)
        # Tier read bandwidth: one pipelined GET of every stored block (as the reader does), timed,
        # against a plain loopback TCP copy of the same number of bytes, in the same run.
        keys = [k for k in redis_cli(port, "KEYS", "akv:*").split(b"\r\n") if k.startswith(b"akv:")]
        get_s, got = [], 0
        for _ in range(3):
            t, got = pipelined_get(port, keys)
            get_s.append(t)
        copy_s = [loopback_copy(got) for _ in range(3)]
        g, l = sorted(get_s)[1], sorted(copy_s)[1]
        print(f"blocks stored: {len(keys)}, {got / len(keys) / 1e6:.2f} MB each; pipelined GET of all {got / 1e6:.0f} MB: "
              f"{g:.3f} s = {got / g / 1e9:.2f} GB/s; loopback TCP copy of the same bytes: {l:.3f} s = "
              f"{got / l / 1e9:.2f} GB/s (medians of 3)")
    finally:
        for s in (a, b, c):
            s.stop()
        redis.send_signal(signal.SIGTERM)
        redis.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
