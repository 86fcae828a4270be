#!/usr/bin/env python3
"""serve-bench.py — server overhead: the same greedy requests through `activekv serve` (HTTP, streamed) and `activekv run`.

    scripts/serve-bench.py [build/release/src/cli/activekv] [--requests 8] [--max-tokens 32] [--rounds 3]

Each round runs the requests through `activekv run` (a trace, all arriving at
time 0) and then through one `activekv serve` (the same prompts as
/v1/completions, temperature 0, streamed, all sent at once from as many client
threads), alternating so both see the same machine load. Both use the default
configuration with stop_at_eos on (the server's completions stop at EOS too).
The outputs are checked equal token for token.

Throughput: output tokens over first arrival to last end (`run`), over first
request sent to last `[DONE]` received (serve). Time to first token, four ways:

  run     `run`'s scheduler: arrival to the step that made the first token;
  sched   the server's scheduler, the same definition: the submission reaches
          the engine thread, to the step that made the first token
          (activekv_time_to_first_token_seconds on /metrics);
  http    the server's HTTP layer: the handler starts (request read by
          cpp-httplib) to the first chunk with text written to the socket
          (activekv_http_time_to_first_token_seconds);
  client  this script: request sent to first text received, on a connection
          opened and used once (GET /health) before the timed request, so TCP
          connection setup is not counted.

sched and http are means over the round's requests (/metrics gives sums and
counts; with --requests 1 each is that request's own figure); run and client
are medians. `http - sched` and `client - sched` are the time the server adds
to the same requests (one prefill each, so the step time cancels out);
`client - run` compares two processes' prefills and carries their noise.
After the timed requests, the first prompt is sent once more, alone: its
prefix is reused, the prefill is short, and the same three figures are printed
for it (from the /metrics sums before and after it).
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


def metric_sums(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    values = {}
    for line in body.splitlines():
        m = re.match(r"^(activekv_\w+_(?:sum|count)) (\S+)$", line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def mean_of(values, name):
    count = values.get(f"activekv_{name}_count", 0)
    return values[f"activekv_{name}_sum"] / count if count else float("nan")


def stream_request(port, text, max_tokens):
    """One streamed completion on a connection opened and used once (GET /health) before it is timed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"prompt": text, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    conn.request("GET", "/health")
    conn.getresponse().read()
    return conn, body


def read_stream(conn, body):
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
    t_end = time.perf_counter()
    res.read()
    conn.close()
    return t0, t_end, first, "".join(text), usage


def serve_once(binary, config, texts, max_tokens):
    server = Server(binary, ["--config", config, "--max-queue", str(len(texts))])
    results = [None] * len(texts)
    start = threading.Barrier(len(texts) + 1)

    def client(i):
        conn, body = stream_request(server.port, texts[i], max_tokens)
        start.wait()
        results[i] = read_stream(conn, body)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join()
    sums = metric_sums(server.port)
    # The first prompt once more, alone: its prefix is reused, so its prefill is short and what
    # the server adds weighs more (before TCP_NODELAY, Nagle held this first token 20-40 ms).
    conn, body = stream_request(server.port, texts[0], max_tokens)
    again = read_stream(conn, body)
    sums_again = metric_sums(server.port)
    server.stop()
    t_begin = min(r[0] for r in results)
    t_end = max(r[1] for r in results)
    tokens = sum(r[4]["completion_tokens"] for r in results)

    def delta(name):
        after = sums_again.get(f"activekv_{name}_sum")  # absent from a build without the metric
        return float("nan") if after is None else after - sums.get(f"activekv_{name}_sum", 0)

    return {"tps": tokens / (t_end - t_begin), "client": statistics.median(r[2] for r in results),
            "sched": mean_of(sums, "time_to_first_token_seconds"),
            "http": mean_of(sums, "http_time_to_first_token_seconds"), "outputs": [r[3] for r in results],
            "again": {"client": again[2], "sched": delta("time_to_first_token_seconds"),
                      "http": delta("http_time_to_first_token_seconds"),
                      "cached": again[4]["prompt_tokens_details"]["cached_tokens"],
                      "same": again[3] == results[0][3]}}


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
        srv = serve_once(a.binary, config, texts, a.max_tokens)
        same = run_out == srv["outputs"]
        row = {"run_tps": run_tps, "srv_tps": srv["tps"], "ratio": srv["tps"] / run_tps, "run": run_ttft,
               "sched": srv["sched"], "http": srv["http"], "client": srv["client"]}
        row.update({f"again_{key}": srv["again"][key] for key in ("client", "sched", "http")})
        rows.append(row)
        ms = {key: row[key] * 1e3 for key in ("run", "sched", "http", "client")}
        print(f"round {k + 1}: run {run_tps:.1f} tok/s | serve {srv['tps']:.1f} tok/s | ratio {row['ratio']:.3f} | "
              f"TTFT ms: run {ms['run']:.2f}, sched {ms['sched']:.2f}, http {ms['http']:.2f}, "
              f"client {ms['client']:.2f} | http-sched {ms['http'] - ms['sched']:+.2f}, "
              f"client-sched {ms['client'] - ms['sched']:+.2f}, client-run {ms['client'] - ms['run']:+.2f} | "
              f"outputs equal: {same} | load {os.getloadavg()[0]:.1f}", flush=True)
        g = {key: srv["again"][key] * 1e3 for key in ("client", "sched", "http")}
        print(f"  repeated first prompt ({srv['again']['cached']} tokens reused, same text: {srv['again']['same']}): "
              f"TTFT ms: sched {g['sched']:.2f}, http {g['http']:.2f}, client {g['client']:.2f} | "
              f"http-sched {g['http'] - g['sched']:+.2f}, client-sched {g['client'] - g['sched']:+.2f}", flush=True)
        if not same:
            for i, (x, y) in enumerate(zip(run_out, srv["outputs"])):
                if x != y:
                    print(f"  request {i}: run {x!r}\n             serve {y!r}")

    def med(f):
        return statistics.median(f(r) for r in rows)

    print(f"median of {len(rows)} rounds: run {med(lambda r: r['run_tps']):.1f} tok/s, serve "
          f"{med(lambda r: r['srv_tps']):.1f} tok/s, throughput ratio serve/run {med(lambda r: r['ratio']):.3f}")
    print(f"median TTFT ms: run {med(lambda r: r['run']) * 1e3:.2f}, sched {med(lambda r: r['sched']) * 1e3:.2f}, "
          f"http {med(lambda r: r['http']) * 1e3:.2f}, client {med(lambda r: r['client']) * 1e3:.2f}")
    print(f"median added TTFT ms: http - sched {med(lambda r: r['http'] - r['sched']) * 1e3:+.2f} (the server's HTTP "
          f"layer and intake), client - sched {med(lambda r: r['client'] - r['sched']) * 1e3:+.2f} (as a client sees "
          f"it), client - run {med(lambda r: r['client'] - r['run']) * 1e3:+.2f} (two processes' prefills)")
    print(f"repeated first prompt, median TTFT ms: sched {med(lambda r: r['again_sched']) * 1e3:.2f}, client "
          f"{med(lambda r: r['again_client']) * 1e3:.2f}; added: http - sched "
          f"{med(lambda r: r['again_http'] - r['again_sched']) * 1e3:+.2f}, client - sched "
          f"{med(lambda r: r['again_client'] - r['again_sched']) * 1e3:+.2f}")


if __name__ == "__main__":
    main()
