#!/usr/bin/env python3
"""serve-bench.py — server overhead: the same greedy requests through `activekv serve` (HTTP, streamed) and `activekv run`.

    scripts/serve-bench.py [build/release/src/cli/activekv] [--requests 8] [--max-tokens 32] [--rounds 3]

Each round runs the requests through `activekv run` (a trace, all arriving at
time 0) and then through one `activekv serve` (the same prompts as
/v1/completions, temperature 0, streamed, all sent at once from as many client
threads), alternating so both see the same machine load. Both use the default
configuration with stop_at_eos on (the server's completions stop at EOS too).
Prints per round and the medians: output tokens/s of each, their ratio, and
TTFT p50 of each — `run`'s from the scheduler (arrival to first token), the
server's from the client (request sent to first streamed token), so the
difference is what HTTP, JSON, tokenizing on a handler thread and the intake
add. The outputs are checked equal token for token.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src", "server"))
from serve_harness import Server  # noqa: E402

TOPICS = ["rivers", "mountains", "the sea", "bread", "winter", "clocks", "libraries", "bridges", "bees", "trains",
          "lanterns", "maps"]


def prompts(n):
    out = []
    for i in range(n):
        t = TOPICS[i % len(TOPICS)]
        out.append(f"Here are some notes about {t}. " * 6 + f"Now write one short paragraph about {t}:")
    return out


def run_once(binary, config, trace_path):
    out = subprocess.run([binary, "run", "--config", config, "--trace", trace_path, "--report", trace_path + ".report"],
                         capture_output=True, text=True, check=True).stdout
    report = json.load(open(os.path.join(trace_path + ".report", "report.json")))
    # run decodes every output token; the server leaves out a final EOS (its finish_reason says "stop").
    outputs = [r.get("output_text", "").replace("<|endoftext|>", "") for r in report["request_list"]]
    tokens = report["tokens"]["out"]
    wall = report["run"]["wall_s"]
    ttft = report["latency"]["ttft_s"]["p50"]
    return tokens / wall, ttft, outputs, out


def serve_once(binary, config, texts, max_tokens):
    server = Server(binary, ["--config", config, "--max-queue", str(len(texts))])
    results = [None] * len(texts)
    start = threading.Barrier(len(texts) + 1)

    def client(i):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        body = json.dumps({"prompt": texts[i], "max_tokens": max_tokens, "temperature": 0, "stream": True,
                           "stream_options": {"include_usage": True}})
        start.wait()
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        first, text, usage = None, [], None
        for raw in res:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                break
            if not line.startswith("data: "):
                continue
            doc = json.loads(line[6:])
            if doc.get("usage"):
                usage = doc["usage"]
            elif doc["choices"] and doc["choices"][0]["text"]:
                if first is None:
                    first = time.perf_counter() - t0
                text.append(doc["choices"][0]["text"])
        results[i] = (t0, time.perf_counter(), first, "".join(text), usage["completion_tokens"])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join()
    server.stop()
    t_begin = min(r[0] for r in results)
    t_end = max(r[1] for r in results)
    tokens = sum(r[4] for r in results)
    return tokens / (t_end - t_begin), statistics.median(r[2] for r in results), [r[3] for r in results]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default="build/release/src/cli/activekv")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    texts = prompts(a.requests)
    work = tempfile.mkdtemp(prefix="serve-bench-")
    config = os.path.join(work, "config.json")
    default = json.load(open(os.path.join(os.path.dirname(__file__), "..", "configs", "default.json")))
    default["stop_at_eos"] = True
    default["arrival_scale"] = 0
    json.dump(default, open(config, "w"))
    trace = os.path.join(work, "trace.jsonl")
    with open(trace, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"b{i}", "arrival_s": 0, "prompt": t, "max_tokens": a.max_tokens}) + "\n")
    rows = []
    print(f"{a.requests} requests, max_tokens {a.max_tokens}, greedy; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for k in range(a.rounds):
        run_tps, run_ttft, run_out, _ = run_once(a.binary, config, trace)
        srv_tps, srv_ttft, srv_out = serve_once(a.binary, config, texts, a.max_tokens)
        same = run_out == srv_out
        rows.append((run_tps, srv_tps, run_ttft, srv_ttft))
        print(f"round {k + 1}: run {run_tps:.1f} tok/s, TTFT p50 {run_ttft * 1e3:.1f} ms | serve {srv_tps:.1f} tok/s, "
              f"TTFT p50 {srv_ttft * 1e3:.1f} ms | ratio {srv_tps / run_tps:.3f} | outputs equal: {same} | "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        if not same:
            for i, (x, y) in enumerate(zip(run_out, srv_out)):
                if x != y:
                    print(f"  request {i}: run {x!r}\n             serve {y!r}")
    med = [statistics.median(c) for c in zip(*rows)]
    print(f"median: run {med[0]:.1f} tok/s, serve {med[1]:.1f} tok/s, throughput ratio serve/run "
          f"{statistics.median(r[1] / r[0] for r in rows):.3f}; TTFT p50 run {med[2] * 1e3:.1f} ms, serve "
          f"{med[3] * 1e3:.1f} ms, added {statistics.median((r[3] - r[2]) for r in rows) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
