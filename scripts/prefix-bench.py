#!/usr/bin/env python3
"""prefix-bench.py — repeated prompts: the same chat requests twice against `activekv serve` (docs/PREFIX.md).

    scripts/prefix-bench.py [build/release/src/cli/activekv] [--requests 24] [--clients 6] [--max-tokens 64]
                            [--config configs/default.json] [--prefix-cache SIZE] [--host-pool SIZE]
                            [--distinct N] [--passes 1|2] [--llama-server PATH --llama-model GGUF]

The workload: `--requests` chat requests (/v1/chat/completions), prompts of 40 to 900 words
(deterministic, seeded), sent by `--clients` concurrent streaming clients, `--max-tokens` each,
temperature 0; then the same requests again (pass 2). Prints, per pass: wall time, output
tokens/s, TTFT p50 and p99 (client side, first streamed text), prompt tokens and cached tokens
(from `usage.prompt_tokens_details.cached_tokens`); then /metrics' prefix cache figures
(activekv_prefix_cache_bytes, _pages, _pages_capacity, _hits_total, _evictions_total). The
outputs of pass 2 are checked equal to pass 1's, byte for byte (exit 1 if not). Last, how many
prompts like these the cache holds: the plan's capacity in pages over the pages they took
(activekv_prefix_cache_pages after the passes, when nothing was evicted). --passes 1 runs the cold
pass only.

--distinct N runs a third phase: N distinct prompts once each, then again in a seeded shuffled
order (choose N and --prefix-cache so they do not all fit), and prints the hit rate of the second
round (requests with cached_tokens > 0 over requests; every prompt shares the chat template's
first page, so a hit of one page is counted apart as "stem only"). --words-min/--words-max set
the prompts' length in words (default 40 to 900). --skew S: round 2 draws N requests with
replacement instead, the prompt of rank r with weight 1/r^S (popular prompts come back often).

--llama-server PATH (with --llama-model) runs the same two passes against llama-server
(`-np 4 -c 32768`, its default --cache-ram), alone, after activekv, and prints its table too.
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src", "server"))
from serve_harness import Server, free_port  # noqa: E402

WORDS = ("river mountain lantern bridge winter library clock harbour meadow engine signal garden "
         "window letter market forest island valley station story market candle paper stone").split()


STEM_TOKENS = 16  # one page: the chat template's start, shared by every prompt (a hit of it alone is not counted)


def make_prompts(n, seed, lo=40, hi=900):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = rng.randint(lo, hi)
        body = " ".join(rng.choice(WORDS) for _ in range(words))
        out.append(f"Request {i}: here are some notes. {body}. Summarise the notes in one short paragraph.")
    return out


def stream_chat(port, text, max_tokens, model):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1200)
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    first, text_out, usage = None, [], None
    for raw in res:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            break
        if not line.startswith("data: "):
            continue
        doc = json.loads(line[6:])
        if doc.get("usage"):
            usage = doc["usage"]
        for choice in doc.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                if first is None:
                    first = time.perf_counter() - t0
                text_out.append(piece)
    t_end = time.perf_counter()
    res.read()
    conn.close()
    return t0, t_end, first, "".join(text_out), usage or {}


def run_pass(port, texts, clients, max_tokens, model=None):
    results = [None] * len(texts)
    lock = threading.Lock()
    queue = list(range(len(texts)))

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
            results[i] = stream_chat(port, texts[i], max_tokens, model)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    outputs = [r[3] for r in results]
    tokens = sum((r[4].get("completion_tokens") or 0) for r in results)
    ttfts = sorted(r[2] for r in results if r[2] is not None)
    prompt_tokens = sum((r[4].get("prompt_tokens") or 0) for r in results)
    cached = sum(((r[4].get("prompt_tokens_details") or {}).get("cached_tokens") or 0) for r in results)
    hits = sum(1 for r in results if ((r[4].get("prompt_tokens_details") or {}).get("cached_tokens") or 0) > STEM_TOKENS)
    p99 = ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] if ttfts else float("nan")
    return {"wall_s": wall, "tok_s": tokens / wall if wall > 0 else 0.0, "tokens": tokens,
            "ttft_p50_s": statistics.median(ttfts) if ttfts else float("nan"), "ttft_p99_s": p99,
            "prompt_tokens": prompt_tokens, "cached_tokens": cached, "hits": hits, "requests": len(texts),
            "outputs": outputs}


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in body.splitlines():
        m = re.match(r"^activekv_(prefix_cache_\w+|prefix_reused_tokens_total) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def row(name, p):
    return (f"| {name} | {p['wall_s']:.1f} s | {p['tok_s']:.1f} | {p['ttft_p50_s']:.2f} s | {p['ttft_p99_s']:.2f} s | "
            f"{p['prompt_tokens']} | {p['cached_tokens']} | {p['hits']}/{p['requests']} |")


def print_table(title, passes):
    print(f"\n{title}")
    print("| pass | wall | output tok/s | TTFT p50 | TTFT p99 | prompt tokens | cached tokens | requests with a hit beyond the template's page |")
    print("|---|---|---|---|---|---|---|---|")
    for name, p in passes:
        print(row(name, p))


def two_passes(port, texts, clients, max_tokens, model=None, passes=2):
    first = run_pass(port, texts, clients, max_tokens, model)
    if passes == 1:
        return first, None, None
    second = run_pass(port, texts, clients, max_tokens, model)
    same = sum(1 for a, b in zip(first["outputs"], second["outputs"]) if a == b)
    return first, second, same


def capacity_line(m, prompts):
    """How many prompts like these the cache holds: its capacity (the plan's prefix_cache_pages) over the
    pages these prompts take with their answers (/metrics, while none was evicted)."""
    pages, capacity = m.get("prefix_cache_pages", 0), m.get("prefix_cache_pages_capacity", 0)
    if pages == 0 or capacity == 0:
        return "prefix cache: none, or nothing stored"
    if m.get("prefix_cache_evictions_total", 0) > 0:
        return f"prefix cache: {pages:.0f} of {capacity:.0f} pages held after evictions (the {prompts} prompts do not all fit)"
    each = pages / prompts
    return (f"prefix cache: the {prompts} prompts with their answers hold {pages:.0f} of its {capacity:.0f} pages "
            f"({m.get('prefix_cache_bytes', 0) / 2**20:.1f} MiB, {each:.1f} pages each on average), none evicted: "
            f"it holds all {prompts}, and about {int(capacity // each)} prompts like them")


def activekv(args, texts):
    extra = ["--max-queue", str(max(len(texts), args.distinct) + 8)]
    if args.config:
        extra += ["--config", args.config]
    if args.host_pool:
        extra += ["--host-pool", args.host_pool]
    if args.prefix_cache:
        extra += ["--prefix-cache", args.prefix_cache]
    server = Server(args.binary, extra, ready_timeout=300)
    try:
        first, second, same = two_passes(server.port, texts, args.clients, args.max_tokens, passes=args.passes)
        m = metrics(server.port)
        if second is None:
            print_table(f"activekv serve ({' '.join(extra)})", [("1 (cold)", first)])
            ok = True
        else:
            print_table(f"activekv serve ({' '.join(extra)})", [("1 (cold)", first), ("2 (same prompts)", second)])
            print(f"pass 2 outputs equal to pass 1, byte for byte: {same} of {len(texts)}")
            ok = same == len(texts)
        print(f"metrics after pass {args.passes}: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(m.items())))
        print(capacity_line(m, len(texts)))
        if args.distinct > 0:
            many = make_prompts(args.distinct, args.seed + 1, args.words_min, args.words_max)
            order = list(range(len(many)))
            if args.skew > 0:  # popular prompts come back more often: rank r drawn with weight 1 / r^skew
                weights = [1.0 / (r + 1) ** args.skew for r in range(len(many))]
                order = random.Random(args.seed + 2).choices(order, weights=weights, k=len(many))
            else:
                random.Random(args.seed + 2).shuffle(order)
            cold = run_pass(server.port, many, args.clients, args.max_tokens)
            warm = run_pass(server.port, [many[i] for i in order], args.clients, args.max_tokens)
            m2 = metrics(server.port)
            again = (f"then {len(order)} drawn by popularity (skew {args.skew}; {len(set(order))} distinct)"
                     if args.skew > 0 else "then again shuffled")
            print_table(f"{args.distinct} distinct prompts, {again}",
                        [("round 1", cold), ("round 2", warm)])
            print(f"round 2 hit rate: {warm['hits']}/{warm['requests']} requests = {warm['hits'] / warm['requests']:.0%}; "
                  f"cached tokens {warm['cached_tokens']} of {warm['prompt_tokens']} prompt tokens "
                  f"({warm['cached_tokens'] / max(1, warm['prompt_tokens']):.0%})")
            print("metrics at the end: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(m2.items())))
        return ok
    finally:
        server.stop()


def llama(args, texts):
    port = free_port()
    proc = subprocess.Popen([args.llama_server, "-m", args.llama_model, "-np", "4", "-c", "32768", "--port", str(port),
                             "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        first, second, same = two_passes(port, texts, args.clients, args.max_tokens, model="default")
        print_table("llama-server (-np 4 -c 32768)", [("1 (cold)", first), ("2 (same prompts)", second)])
        print(f"pass 2 outputs equal to pass 1, byte for byte: {same} of {len(texts)}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", nargs="?", default="build/release/src/cli/activekv")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--config", default="")
    ap.add_argument("--host-pool", default="")
    ap.add_argument("--prefix-cache", default="")
    ap.add_argument("--distinct", type=int, default=0)
    ap.add_argument("--skew", type=float, default=0.0,
                    help="with --distinct: round 2 draws its requests with replacement, rank r with weight 1/r^skew")
    ap.add_argument("--passes", type=int, choices=(1, 2), default=2,
                    help="1: the cold pass only (what the cache holds after it), no comparison")
    ap.add_argument("--words-min", type=int, default=40)
    ap.add_argument("--words-max", type=int, default=900)
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--llama-model", default="")
    args = ap.parse_args()
    if args.llama_server and not args.llama_model:
        ap.error("--llama-server needs --llama-model (the GGUF it serves)")
    texts = make_prompts(args.requests, args.seed, args.words_min, args.words_max)
    ok = activekv(args, texts)
    if args.llama_server:
        llama(args, texts)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
