#!/usr/bin/env python3
"""serve_openai_test.py — the official `openai` client against `activekv serve` on the real model.

1. A chat completion and a streamed one with temperature 0: their text equals
   `activekv generate --chat` on the same prompt and max tokens, token for
   token (the same greedy choices decode to the same text), and the usage
   counts agree with the stream's.
2. A small real-model load: 4 clients, 12 short requests, streamed and not,
   one client disconnecting mid-stream; then /metrics says nothing runs,
   allocations after warm-up are 0 (device and heap), a request was
   cancelled, and SIGINT ends the server with every page and history back
   and exit code 0.
3. The same prompt twice: usage.prompt_tokens_details.cached_tokens is 0, then
   every full page of the prompt but the one holding its last token (from the
   plan's page size), and the two answers are byte for byte equal.
"""
import json
import signal
import subprocess
import sys
import threading
import time

import openai
from prometheus_client.parser import text_string_to_metric_families

from serve_harness import Server, binary_from_argv, free_port

PROMPT = "What is the capital of France? Answer in one sentence."
FOLLOW_UP = "And of Germany?"
SYSTEM = ("You answer questions about computer memory. A KV cache keeps the keys and values of every token a "
          "model has seen, so that each new token attends to the history without recomputing it.")
QUESTION = "In one sentence: why does a server keep a KV cache on the host?"
MAX_TOKENS = 24
failures = []


def metric_values(server):
    body = server.request("GET", "/metrics")[2].decode()
    return {s.name + str(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(body) for s in f.samples}


def start_watching_health(binary, args):
    """Starts the server on a port chosen here and polls /health from the first moment: the statuses seen in order."""
    port, seen, stop = free_port(), [], threading.Event()

    def poll():
        import http.client
        while not stop.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                status = conn.getresponse().status
                conn.close()
                if not seen or seen[-1] != status:
                    seen.append(status)
                if status == 200:
                    return
            except OSError:
                pass  # not bound yet
            time.sleep(0.005)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    server = Server(binary, args, port=port)
    poller.join(timeout=10)
    stop.set()
    return server, seen


def conversation(first_reply):
    return [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": first_reply},
            {"role": "user", "content": FOLLOW_UP}]


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def main():
    binary = binary_from_argv(sys.argv)
    reference = subprocess.run([binary, "generate", "--chat", "--prompt", PROMPT, "--max-tokens", str(MAX_TOKENS)],
                               capture_output=True, text=True, timeout=300, check=True).stdout
    reference = reference[:-1] if reference.endswith("\n") else reference  # generate ends with a newline
    print("generate:", repr(reference), flush=True)

    server, health = start_watching_health(binary, ["--max-queue", "4", "--grace", "5"])
    print("/health while starting:", health, flush=True)
    check(health[:1] == [503] and health[-1:] == [200], f"/health while the model loads then ready: {health}")
    follow_up = None
    try:
        client = openai.OpenAI(base_url=server.url("/v1"), api_key="not-needed", max_retries=0, timeout=300)
        model = client.models.list().data[0].id
        chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}],
                                              temperature=0, max_tokens=MAX_TOKENS)
        text = chat.choices[0].message.content
        print("chat:    ", repr(text), flush=True)
        check(text == reference, "the chat completion differs from activekv generate --chat")
        check(chat.id.startswith("chatcmpl-"), f"id {chat.id}")
        check(chat.usage.prompt_tokens > 0 and chat.usage.completion_tokens > 0, f"usage {chat.usage}")
        check(chat.usage.prompt_tokens_details.cached_tokens == 0, "cached_tokens")

        # Turn 2 of the conversation, right after turn 1: it adopts turn 1's retained history. (Later
        # requests with turn 1's prompt would adopt it in turn, and the stop-string one, which ends
        # through the cancel path, drops it.)
        before = metric_values(server)
        follow_up = client.chat.completions.create(model=model, messages=conversation(text), temperature=0, max_tokens=12)
        after = metric_values(server)
        cached = follow_up.usage.prompt_tokens_details.cached_tokens
        reused = after["activekv_prefix_reused_tokens_total[]"] - before["activekv_prefix_reused_tokens_total[]"]
        print(f"follow-up: {follow_up.choices[0].message.content!r}, cached {cached} of "
              f"{follow_up.usage.prompt_tokens}, /metrics reused +{reused:.0f}", flush=True)
        check(cached > 0, f"the follow-up turn reused nothing: {follow_up.usage}")
        check(cached == reused, f"cached_tokens {cached} != activekv_prefix_reused_tokens_total increase {reused}")
        check(after["activekv_retained_histories[]"] >= 0 and after["activekv_retained_dropped_total[]"] >= 0,
              "retained history metrics missing")

        pieces, usage, finish, ids = [], None, None, set()
        stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}],
                                                temperature=0, max_tokens=MAX_TOKENS, stream=True,
                                                stream_options={"include_usage": True})
        for chunk in stream:
            ids.add(chunk.id)
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                if choice.finish_reason:
                    finish = choice.finish_reason
        streamed = "".join(pieces)
        print("stream:  ", repr(streamed), flush=True)
        check(streamed == reference, "the streamed completion differs from activekv generate --chat")
        check(len(ids) == 1, f"chunks carry {len(ids)} ids")
        check(finish in ("stop", "length"), f"finish_reason {finish}")
        check(usage is not None and usage.completion_tokens == chat.usage.completion_tokens and
              usage.prompt_tokens == chat.usage.prompt_tokens, f"stream usage {usage} vs {chat.usage}")
        check(len(pieces) >= usage.completion_tokens - 2 if usage else False, "fewer chunks than tokens")

        # A stop string cuts the text before it and finishes with "stop".
        if "Paris" in reference:
            cut = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}],
                                                 temperature=0, max_tokens=MAX_TOKENS, stop=["Paris"])
            check(cut.choices[0].message.content == reference[:reference.index("Paris")],
                  f"stop string: {cut.choices[0].message.content!r}")
            check(cut.choices[0].finish_reason == "stop", f"stop string: finish_reason {cut.choices[0].finish_reason}")
        # Seeded sampling: the same seed gives the same text (each context's sampler is reseeded at admission).
        sampled = [client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Tell me a story."}],
                                                  temperature=1.0, top_p=0.95, seed=1234, max_tokens=12)
                   .choices[0].message.content for _ in range(2)]
        check(sampled[0] == sampled[1] and sampled[0], f"seeded sampling differs: {sampled}")

        completion = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4,
                                               temperature=0)
        check(completion.choices[0].text.strip() != "", "an empty plain completion")

        # The same prompt twice (a system prompt and a document resent): the first request reuses
        # nothing, the second adopts every full page of the prompt that leaves a token to prefill,
        # (prompt_tokens - 1) // page_tokens pages, and its text is byte for byte the first's.
        page_tokens = json.loads(server.request("GET", "/v1/activekv/plan")[2])["arena"]["page_tokens"]
        twice = [client.chat.completions.create(model=model, messages=[{"role": "system", "content": SYSTEM},
                                                                       {"role": "user", "content": QUESTION}],
                                                temperature=0, max_tokens=16) for _ in range(2)]
        prompt_tokens = twice[0].usage.prompt_tokens
        cached = [r.usage.prompt_tokens_details.cached_tokens for r in twice]
        # Every full page (copied from the retained history, with its device pages), or every token but
        # the last when the host prefix cache also gives the partial last page (docs/PREFIX_CACHE.md).
        expected = (prompt_tokens - 1) // page_tokens * page_tokens
        print(f"same prompt twice: {prompt_tokens} prompt tokens, cached {cached}, expected [0, {expected}] or "
              f"[0, {prompt_tokens - 1}] (pages of {page_tokens})", flush=True)
        check(cached in ([0, expected], [0, prompt_tokens - 1]), f"cached_tokens {cached}, expected [0, {expected}]")
        # The host prefix cache on /metrics (issue 29's names): the two requests' full pages are held,
        # at their real size, and nothing was evicted from the default 512 MiB.
        m = metric_values(server)
        plan = json.loads(server.request("GET", "/v1/activekv/plan")[2])
        print("prefix cache metrics:", {k: v for k, v in m.items() if k.startswith("activekv_prefix_cache")}, flush=True)
        for name in ("bytes", "pages", "pages_capacity", "lookups_total", "hits_total", "hit_tokens_total",
                     "evictions_total"):
            check(f"activekv_prefix_cache_{name}[]" in m, f"/metrics lacks activekv_prefix_cache_{name}")
        if "activekv_prefix_cache_pages[]" in m and "activekv_prefix_cache_bytes[]" in m:
            pages = m["activekv_prefix_cache_pages[]"]
            check(pages >= (prompt_tokens + 1) // page_tokens, f"the cache holds {pages} pages after the prompt ran twice")
            check(m["activekv_prefix_cache_bytes[]"] == pages * plan["host_pool"]["prefix_cache_page_bytes"],
                  "activekv_prefix_cache_bytes is not pages x the plan's prefix_cache_page_bytes")
            check(m["activekv_prefix_cache_evictions_total[]"] == 0, "evictions from a nearly empty cache")
        check(twice[1].usage.prompt_tokens == prompt_tokens, "the second request's prompt_tokens differ")
        check(twice[0].choices[0].message.content.encode() == twice[1].choices[0].message.content.encode() and
              twice[0].choices[0].message.content, "the repeated prompt's output differs from the first's")

        # A small real-model load, one client leaving mid-stream.
        results = []

        def worker(k):
            c = openai.OpenAI(base_url=server.url("/v1"), api_key="x", max_retries=0, timeout=300)
            for j in range(3):
                msg = [{"role": "user", "content": f"Name a colour. ({k}.{j})"}]
                if k == 0 and j == 0:
                    s = c.chat.completions.create(model=model, messages=msg, max_tokens=64, stream=True,
                                                  temperature=0.7, seed=k)
                    for n, _ in enumerate(s):
                        if n == 2:
                            s.response.close()  # disconnect mid-stream
                            break
                    results.append("disconnected")
                elif j % 2:
                    s = c.chat.completions.create(model=model, messages=msg, max_tokens=8, stream=True,
                                                  temperature=0.8, top_p=0.9, seed=j)
                    results.append("streamed" if any(True for _ in s) else "empty")
                else:
                    r = c.chat.completions.create(model=model, messages=msg, max_tokens=8, temperature=0)
                    results.append("completed" if r.usage.completion_tokens > 0 else "empty")

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("load:", results, flush=True)
        check(len(results) == 12 and "empty" not in results, f"load results {results}")

        for _ in range(100):
            m = metric_values(server)
            if m["activekv_requests_running[]"] == 0 and m["activekv_requests_waiting[]"] == 0:
                break
            time.sleep(0.1)
        check(m["activekv_requests_running[]"] == 0, "requests still running after the load")
        check(m["activekv_device_allocations_after_warmup[]"] == 0, "device allocations after warm-up")
        check(m["activekv_heap_allocations_after_warmup[]"] == 0, "heap allocations after warm-up")
        check(m["activekv_requests_total[('outcome', 'cancelled')]"] >= 1, "the disconnect was not cancelled")
        check(m["activekv_requests_total[('outcome', 'finished')]"] >= 14, "too few finished")
        check(m["activekv_h2d_bytes_total[]"] > 0, "no bytes staged")
        code, out = server.stop(signal.SIGINT)  # the load test uses SIGTERM
        print(out[-1200:], flush=True)
        check(code == 0, f"exit code {code}")
        check("every page and history back: yes" in out, "not every page and history came back")
    finally:
        if server.proc.poll() is None:
            server.proc.kill()

    # The same follow-up turn on a server without prefix reuse: the same text, nothing cached.
    if follow_up is not None:
        plain = Server(binary, ["--no-prefix-reuse"])
        try:
            client = openai.OpenAI(base_url=plain.url("/v1"), api_key="not-needed", max_retries=0, timeout=300)
            model = client.models.list().data[0].id
            first = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}],
                                                   temperature=0, max_tokens=MAX_TOKENS).choices[0].message.content
            again = client.chat.completions.create(model=model, messages=conversation(first), temperature=0,
                                                   max_tokens=12)
            print(f"follow-up without reuse: {again.choices[0].message.content!r}, cached "
                  f"{again.usage.prompt_tokens_details.cached_tokens}", flush=True)
            check(again.choices[0].message.content == follow_up.choices[0].message.content,
                  "the follow-up turn's text differs with --no-prefix-reuse")
            check(again.usage.prompt_tokens == follow_up.usage.prompt_tokens, "prompt_tokens differ without reuse")
            check(again.usage.prompt_tokens_details.cached_tokens == 0, "--no-prefix-reuse still reported cached tokens")
            check(metric_values(plain)["activekv_prefix_reused_tokens_total[]"] == 0, "--no-prefix-reuse still reused")
            code, _ = plain.stop()
            check(code == 0, f"--no-prefix-reuse server: exit code {code}")
        finally:
            if plain.proc.poll() is None:
                plain.proc.kill()
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("serve_openai_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
