#!/usr/bin/env python3
"""serve_soak.py — issue 24's mixed load against the real `activekv serve` for N minutes (run by scripts/serve-soak.sh).

The server runs the default model and configuration; the clients are those of
serve_mixed_load.py, drawing until the time is up. Prints what was sent, what
came back (per outcome), every greedy text that differs from the same request
sent alone, and /metrics' outcome counts against what was sent. If the server
dies (an assertion, a signal) it prints its exit status and its last lines.
Exit status: 0 when nothing aborted, nothing differed, every count matched,
and SIGTERM ended the server with exit 0 and every page back; 1 otherwise.
"""
import argparse
import json
import signal
import sys
import threading
import time

from serve_harness import Server
from serve_mixed_load import make_jobs, metric_values, outcome_counts, references, start_load, wait_idle


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bases", type=int, default=4, help="base texts (each gives 4 prompts that share its prefix)")
    ap.add_argument("--words-max", type=int, default=900)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--server-args", default="", help="more arguments for activekv serve, space-separated")
    a = ap.parse_args()
    if not (0 < a.minutes <= 24 * 60) or not (1 <= a.clients <= 64):
        ap.error("--minutes must be in (0, 1440] and --clients in [1, 64]")

    server = Server(a.binary, ["--grace", "10", *a.server_args.split()])
    disconnect_tokens = 64
    ok = True
    try:
        t0 = time.time()
        jobs = make_jobs(seed=a.seed, bases=a.bases, words_min=12, words_max=a.words_max, max_tokens=a.max_tokens)
        ref, counting_finish = references(server.port, jobs, disconnect_tokens)
        print(f"soak: {len(ref)} prompts sent alone in {time.time() - t0:.1f} s (the references); "
              f"{a.clients} clients for {a.minutes:g} min", flush=True)
        if counting_finish != "length":
            print(f"soak: the counting prompt ends by itself ({counting_finish}): disconnect counts could be off")
        model = json.loads(server.request("GET", "/v1/models")[2])["data"][0]["id"]
        before = metric_values(server.port)
        stop = threading.Event()
        threads, tally = start_load(server.port, model, jobs, ref, a.clients, 0, a.seed, disconnect_tokens, stop)
        end = time.time() + a.minutes * 60
        next_report = time.time() + 30
        while time.time() < end and server.proc.poll() is None:
            time.sleep(0.5)
            if time.time() >= next_report:
                next_report += 30
                with tally.lock:
                    print(f"soak: {time.time() - t0:6.0f} s: {sum(tally.sent.values())} requests, "
                          f"{dict(sorted(tally.outcomes.items()))}", flush=True)
        stop.set()
        for t in threads:
            t.join()
        print(f"soak: {sum(tally.sent.values())} requests in {time.time() - t0:.0f} s", flush=True)
        for line in tally.lines():
            print(line, flush=True)
        if server.proc.poll() is not None:
            time.sleep(0.5)
            print(f"ABORT: the server exited with status {server.proc.returncode} during the soak; its last lines:")
            print("".join(server.lines[-30:]), flush=True)
            return 1
        after = wait_idle(server.port)
        grown = {k: v - outcome_counts(before)[k] for k, v in outcome_counts(after).items()}
        expected = tally.expected_outcomes()
        print(f"/metrics outcomes grew by {grown}; sent {expected}", flush=True)
        allocs = (after["activekv_device_allocations_after_warmup[]"], after["activekv_heap_allocations_after_warmup[]"])
        print(f"allocations after warm-up: device {allocs[0]:.0f}, heap {allocs[1]:.0f}; prefix tokens reused "
              f"{after['activekv_prefix_reused_tokens_total[]'] - before['activekv_prefix_reused_tokens_total[]']:.0f}",
              flush=True)
        for bad, what in [(tally.differing, "differing outputs"), (tally.errors, "requests came back wrong"),
                          (grown != expected, "the /metrics counts differ from what was sent"),
                          (allocs != (0, 0), "allocations after warm-up")]:
            if bad:
                ok = False
                print(f"FAIL: {what}", flush=True)
        code, out = server.stop(signal.SIGTERM)
        print("".join(out.splitlines(keepends=True)[-6:]), flush=True)
        if code != 0 or "every page and history back: yes" not in out:
            ok = False
            print(f"FAIL: SIGTERM: exit status {code}", flush=True)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    print("soak: ok" if ok else "soak: FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
