#!/usr/bin/env python3
"""serve_stress_test.py — the real `activekv serve` (default model) under the mixed load of issue 24.

6 clients, 5 requests each (serve_mixed_load.py): greedy chat and completions,
streamed and not, through the official `openai` client and raw HTTP, prompts
that repeat and share prefixes (retained histories adopted), clients closing a
stream after its first bytes, malformed bodies. Then:

- every greedy text under load equals the same request's text sent alone;
- /metrics' activekv_requests_total grew by exactly what was sent, per outcome;
- allocations after warm-up are 0 (device and heap), and prefixes were reused;
- SIGTERM: exit 0, every page and history back.

Bounded: 8 prompts of 12 to 80 words (plus their suffixes and turns) and max_tokens 8.
"""
import json
import signal
import sys
import time

from serve_harness import Server, binary_from_argv
from serve_mixed_load import make_jobs, metric_values, outcome_counts, references, run_load, wait_idle

CLIENTS = 6
REQUESTS = 5
DISCONNECT_TOKENS = 32
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def main():
    binary = binary_from_argv(sys.argv)
    server = Server(binary, ["--max-queue", "8", "--grace", "5"])
    try:
        t0 = time.time()
        jobs = make_jobs(seed=24, bases=2, words_min=12, words_max=80, max_tokens=8)
        ref, counting_finish = references(server.port, jobs, DISCONNECT_TOKENS)
        check(counting_finish == "length", f"the counting prompt ends by itself ({counting_finish}): a disconnect "
              "could then finish before its cancel")
        print(f"{len(ref)} references sent alone in {time.time() - t0:.1f} s", flush=True)
        before = metric_values(server.port)
        model = json.loads(server.request("GET", "/v1/models")[2])["data"][0]["id"]
        t1 = time.time()
        tally = run_load(server.port, model, jobs, ref, CLIENTS, REQUESTS, seed=24, disconnect_tokens=DISCONNECT_TOKENS)
        print(f"load: {CLIENTS} clients, {sum(tally.sent.values())} requests in {time.time() - t1:.1f} s", flush=True)
        for line in tally.lines():
            print(line, flush=True)
        after = wait_idle(server.port)
        grown = {k: after_v - outcome_counts(before)[k] for k, after_v in outcome_counts(after).items()}
        print("/metrics grew by:", grown, flush=True)
        check(not tally.differing, f"{len(tally.differing)} greedy outputs under load differ from the same prompt alone")
        check(not tally.errors, f"{len(tally.errors)} requests came back wrong")
        check(grown == tally.expected_outcomes(), f"/metrics outcomes {grown} != sent {tally.expected_outcomes()}")
        check(sum(tally.sent.values()) == CLIENTS * REQUESTS, "a request was not tallied")
        check(tally.outcomes.get("equal", 0) >= CLIENTS * REQUESTS // 2, f"too few greedy answers: {tally.outcomes}")
        check(after["activekv_requests_running[]"] == 0 and after["activekv_requests_waiting[]"] == 0,
              "requests still running after the load")
        check(after["activekv_device_allocations_after_warmup[]"] == 0, "device allocations after warm-up")
        check(after["activekv_heap_allocations_after_warmup[]"] == 0, "heap allocations after warm-up")
        check(after["activekv_prefix_reused_tokens_total[]"] > before["activekv_prefix_reused_tokens_total[]"],
              "no retained prefix was adopted under the load")
        code, out = server.stop(signal.SIGTERM)
        print(out[-900:], flush=True)
        check(code == 0, f"exit code {code} after SIGTERM")
        check("every page and history back: yes" in out, "not every page and history came back")
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    if failures:
        print(f"{len(failures)} failures", flush=True)
        return 1
    print("serve_stress_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
