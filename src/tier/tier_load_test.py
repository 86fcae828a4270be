"""tier_load_test.py — a bounded load test through two servers and one Redis, conversations moving between them.

Servers A and B share one redis-server (the KV tier); C has no tier. Each of
N conversations runs T turns; turn t of conversation n goes to A or B in turn
((n + t) mod 2), so every follow-up lands on the server that did not run the
previous turn and can only reuse it through the tier. K conversations run at
once. Every turn is sent to C too, and its greedy output must be identical:
the report counts lost requests (no 200 answer) and wrong outputs, and both
must be 0. Bounded: N × T turns, a deadline, traffic only to 127.0.0.1.

usage: tier_load_test.py path/to/activekv [--long]   (quick: 4 × 3 turns, 2 at once; long: 12 × 4, 4 at once)
"""
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serve_harness import Server, binary_from_argv  # noqa: E402
from serve_tier_test import Redis, check, free_port, metric  # noqa: E402


def ask(server, prompt, max_tokens):
    try:
        status, _, body = server.request("POST", "/v1/completions",
                                         {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}, timeout=300)
    except OSError as e:
        return None, 0, f"{type(e).__name__}: {e}"
    if status != 200:
        return None, 0, f"status {status}"
    r = json.loads(body)
    return r["choices"][0]["text"], r["usage"]["prompt_tokens_details"]["cached_tokens"], None


def main():
    binary = binary_from_argv(sys.argv)
    long_run = "--long" in sys.argv[2:]
    if shutil.which("redis-server") is None:
        print("SKIP: redis-server is not installed (scripts/install-deps.sh --test)")
        return
    conversations, turns, at_once, deadline_s = (12, 4, 4, 900) if long_run else (4, 3, 2, 120)
    block, max_tokens = 32, 4
    tmp = tempfile.mkdtemp(prefix="akv-tier-load-")
    base = {"host_pool": "128MiB", "device_pool": "24MiB", "page_tokens": 16, "tile_tokens": 256, "tiles": 4,
            "max_context": 1024, "max_seqs": at_once, "step_tokens": 256, "prefill_chunk_tokens": 128, "threads": 2,
            "stop_at_eos": False, "prefix_reuse": True}
    port = free_port()
    plain, tiered = os.path.join(tmp, "plain.json"), os.path.join(tmp, "tier.json")
    with open(plain, "w") as f:
        json.dump(base, f)
    with open(tiered, "w") as f:
        json.dump({**base, "kv_tier": {"url": f"redis://127.0.0.1:{port}", "block_tokens": block, "write_queue": 16}}, f)
    redis = Redis(port)
    servers = []
    lock = threading.Lock()
    tally = {"turns": 0, "lost": 0, "wrong": 0, "cached_from_tier": 0, "problems": []}
    started = time.time()
    try:
        a = Server(binary, ["--config", tiered])
        servers.append(a)
        b = Server(binary, ["--config", tiered])
        servers.append(b)
        c = Server(binary, ["--config", plain])
        servers.append(c)
        pair = (a, b)

        def conversation(n):
            prompt = f"Conversation {n}. " + " ".join(f"Fact {i}: item {n * 100 + i} is blue." for i in range(6))
            for t in range(turns):
                if time.time() - started > deadline_s:
                    return
                server = pair[(n + t) % 2]
                out, cached, err = ask(server, prompt, max_tokens)
                ref, _, ref_err = ask(c, prompt, max_tokens)
                with lock:
                    tally["turns"] += 1
                    if err is not None or ref_err is not None:
                        tally["lost"] += 1
                        tally["problems"].append(f"conversation {n} turn {t}: {err or ref_err}")
                        return
                    if out != ref:
                        tally["wrong"] += 1
                        tally["problems"].append(f"conversation {n} turn {t}: {out!r} != {ref!r}")
                    if t > 0:
                        tally["cached_from_tier"] += cached
                prompt = prompt + out + f" Question {t}: and item {n * 100 + t}?"

        pending = list(range(conversations))
        while pending:
            batch, pending = pending[:at_once], pending[at_once:]
            threads = [threading.Thread(target=conversation, args=(n,)) for n in batch]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        elapsed = time.time() - started
        hits = (metric(a, "tier_hits_total") or 0) + (metric(b, "tier_hits_total") or 0)
        print(f"{tally['turns']} turns of {conversations} conversations ({at_once} at once) in {elapsed:.1f} s: "
              f"lost {tally['lost']}, wrong {tally['wrong']}, follow-up tokens cached {tally['cached_from_tier']}, "
              f"tier hits {hits:.0f}")
        for p in tally["problems"][:10]:
            print("  " + p)
        check(tally["turns"] == conversations * turns, f"every turn ran ({tally['turns']} of {conversations * turns})")
        check(tally["lost"] == 0, "0 lost")
        check(tally["wrong"] == 0, "0 wrong outputs (each equal to the server without a tier)")
        check(hits > 0 and tally["cached_from_tier"] > 0, "follow-ups on the other server restored blocks from the tier")
    finally:
        for s in servers:
            s.stop()
        redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
