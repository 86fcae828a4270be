#!/usr/bin/env python3
"""serve_load_test.py — `activekv serve --engine fake` under load, bad requests, /metrics and SIGTERM.

1. Load: 40 concurrent clients send 320 requests on loopback, streamed and
   not, prompts of 20 to 3,000 tokens (the fake engine's tokens are bytes);
   about one streamed request in six disconnects after three chunks (and
   one non-streamed request's client leaves while it runs). Every
   request completes with exactly max_tokens tokens, is cancelled by its
   client, or gets a deliberate 429 (Retry-After, a message saying why);
   none is lost and no id is answered twice. The counters agree.
2. /metrics, parsed by prometheus_client: every listed metric present and
   sane; allocations after warm-up 0 (device and heap).
3. Every bad request gets its 4xx with an OpenAI-style error naming the
   field; /health and a normal completion still answer afterwards.
4. SIGTERM with a long request running and a grace period of 0.3 s: the
   request is cancelled, the summary is printed, every page and history is
   back, exit code 0.
"""
import http.client
import json
import random
import socket
import sys
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

from serve_harness import Server, binary_from_argv

CLIENTS = 40
PER_CLIENT = 8
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def metrics(server):
    status, _, body = server.request("GET", "/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            key = s.name + ("" if not s.labels else "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}")
            out[key] = s.value
    return out


def one_request(server, rng, results, lock):
    n = rng.randint(20, 3000)
    chat = rng.random() < 0.4
    stream = rng.random() < 0.5
    disconnect = stream and rng.random() < 0.17
    max_tokens = rng.randint(4, 40) if not disconnect else 400
    text = "".join(rng.choice("abcdefghij ") for _ in range(n))
    if chat:
        # The fake engine's chat format is "user: {text}\nassistant: " (18 bytes around the text).
        text = text[: max(3, n - 18)]
        body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "stream": stream}
        path = "/v1/chat/completions"
        prompt_tokens = len(text) + 18
    else:
        body = {"prompt": text, "max_tokens": max_tokens, "stream": stream, "temperature": 0}
        path = "/v1/completions"
        prompt_tokens = len(text)
    if stream:
        body["stream_options"] = {"include_usage": True}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    outcome, cached = None, 0
    rid = res.getheader("X-Request-Id")
    if res.status == 429:
        err = json.loads(res.read())
        check(res.getheader("Retry-After") is not None, "429 without Retry-After")
        check("host pool holds" in err["error"]["message"] and "waiting" in err["error"]["message"],
              f"429 message does not say why: {err}")
        outcome = "429"
    elif res.status != 200:
        outcome = f"status {res.status}: {res.read()[:200]}"
    elif not stream:
        doc = json.loads(res.read())
        u = doc["usage"]
        check(u["completion_tokens"] == max_tokens, f"{doc['id']}: {u['completion_tokens']} tokens, asked {max_tokens}")
        check(u["prompt_tokens"] == prompt_tokens, f"{doc['id']}: prompt_tokens {u['prompt_tokens']} != {prompt_tokens}")
        check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], "total_tokens")
        cached = u["prompt_tokens_details"]["cached_tokens"]
        check(0 <= cached < u["prompt_tokens"], f"{doc['id']}: cached_tokens {cached} of {u['prompt_tokens']}")
        check(doc["choices"][0]["finish_reason"] == "length", "finish_reason")
        check(doc["id"] == rid, "X-Request-Id differs from the body's id")
        outcome = "completed"
    else:
        chunks, done, usage, finish = 0, False, None, None
        for raw in res:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            doc = json.loads(line[6:])
            check(doc["id"] == rid, "a chunk's id differs from X-Request-Id")
            if doc.get("usage"):
                usage = doc["usage"]
            elif doc["choices"] and doc["choices"][0]["finish_reason"]:
                finish = doc["choices"][0]["finish_reason"]
            chunks += 1
            if disconnect and chunks == 3:
                conn.sock.shutdown(socket.SHUT_RDWR)
                conn.close()
                outcome = "disconnected"
                break
        if outcome is None:
            check(done, f"{rid}: stream without [DONE]")
            check(finish == "length", f"{rid}: finish_reason {finish}")
            check(usage is not None and usage["completion_tokens"] == max_tokens, f"{rid}: usage {usage}")
            check(usage is not None and usage["prompt_tokens"] == prompt_tokens, f"{rid}: prompt tokens {usage}")
            cached = usage["prompt_tokens_details"]["cached_tokens"] if usage else 0
            check(0 <= cached < prompt_tokens, f"{rid}: cached_tokens {cached} of {prompt_tokens}")
            outcome = "completed"
    conn.close()
    with lock:
        results.append((outcome, rid, cached))


def load(server):
    results, lock = [], threading.Lock()

    def client(seed):
        rng = random.Random(seed)
        for _ in range(PER_CLIENT):
            try:
                one_request(server, rng, results, lock)
            except Exception as e:  # noqa: BLE001 — a lost request is a failure to report, not to hide
                with lock:
                    results.append((f"exception {e!r}", None, 0))

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    counts = {}
    for outcome, _, _ in results:
        counts[outcome] = counts.get(outcome, 0) + 1
    print(f"load: {len(results)} requests in {elapsed:.1f} s: {counts}", flush=True)
    check(len(results) == CLIENTS * PER_CLIENT, "a request is missing")
    check(set(counts) <= {"completed", "429", "disconnected"}, f"unexpected outcomes {counts}")
    ids = [rid for outcome, rid, _ in results if outcome != "429"]
    check(len(ids) == len(set(ids)), "an id was answered twice")
    check(counts.get("completed", 0) >= 100, "too few requests completed to mean anything")
    check(counts.get("429", 0) >= 1, "the bounded queue never pushed back (the test should overflow it)")
    check(counts.get("disconnected", 0) >= 3, "too few clients disconnected")
    return counts, sum(cached for _, _, cached in results)


def check_metrics(server, counts, cached_tokens):
    # Cancellation after a disconnect is asynchronous: wait until everything has ended.
    deadline = time.time() + 30
    while True:
        m = metrics(server)
        ended = m['activekv_requests_total{outcome=finished}'] + m['activekv_requests_total{outcome=cancelled}']
        if (ended == counts.get("completed", 0) + counts.get("disconnected", 0) and m["activekv_requests_running"] == 0) \
                or time.time() > deadline:
            break
        time.sleep(0.1)
    print("metrics:", {k: v for k, v in m.items() if "_bucket" not in k}, flush=True)
    check(ended == counts.get("completed", 0) + counts.get("disconnected", 0),
          f"finished + cancelled = {ended}, clients saw {counts}")
    check(m['activekv_requests_total{outcome=cancelled}'] >= 1, "no disconnect cancelled a running request")
    check(m['activekv_requests_total{outcome=queue_full}'] == counts.get("429", 0), "queue_full counter != 429s seen")
    check(m["activekv_requests_running"] == 0 and m["activekv_requests_waiting"] == 0, "requests left running")
    check(m["activekv_host_histories_in_use"] == 0, "histories still in use")
    check(m["activekv_host_histories_total"] > 0, "no histories in the plan")
    check(m["activekv_device_pages_resident"] == 0, "pages still resident after the load")
    check(m["activekv_device_pages_free"] == m["activekv_device_pages_total"], "pages not all free")
    check(m["activekv_device_pages_borrowed"] == 0, "pages still borrowed")
    for name in ["pages_staged_total", "h2d_bytes_total", "d2h_bytes_total", "d2d_bytes_total", "reclaimed_pages_total",
                 "quarantines_total"]:
        check(f"activekv_{name}" in m and m[f"activekv_{name}"] >= 0, f"{name} missing")
    check(m["activekv_d2h_bytes_total"] > 0, "no bytes written back during the load")
    check(m["activekv_quarantines_total"] == 0, "quarantines during a clean load")
    for name in ["prefix_reused_tokens_total", "retained_histories", "retained_dropped_total"]:
        check(f"activekv_{name}" in m and m[f"activekv_{name}"] >= 0, f"{name} missing")
    check(m["activekv_prefix_reused_tokens_total"] >= cached_tokens,
          "clients were told of more cached tokens than /metrics counts as reused")
    check(m["activekv_device_allocations_after_warmup"] == 0, "device allocations after warm-up")
    check(m["activekv_heap_allocations_after_warmup"] == 0, "heap allocations after warm-up on the step path")
    check(m["activekv_prompt_tokens_total"] > 20 * counts.get("completed", 0), "prompt tokens total too small")
    check(m["activekv_generation_tokens_total"] >= 4 * counts.get("completed", 0), "generation tokens total too small")
    for h in ["time_to_first_token_seconds", "inter_token_latency_seconds", "queue_time_seconds", "e2e_latency_seconds",
              "http_time_to_first_token_seconds"]:
        count = m.get(f"activekv_{h}_count", 0)
        check(count > 0, f"histogram {h} is empty")
        check(m.get(f"activekv_{h}_bucket{{le=+Inf}}") == count, f"histogram {h}: +Inf bucket != count")
        check(m.get(f"activekv_{h}_sum", -1) >= 0, f"histogram {h}: negative sum")


def complete(server, body):
    status, _, payload = server.request("POST", "/v1/completions", body)
    check(status == 200, f"completion {body}: status {status} {payload[:200]!r}")
    return json.loads(payload) if status == 200 else None


def check_reuse(server):
    """A follow-up that repeats a finished request's prompt adopts its retained prefix: cached_tokens > 0,
    equal to what /metrics counts as reused, and the text is the same as the first time."""
    prompt = "".join(random.Random(7).choice("klmnopqrst ") for _ in range(300))
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0}
    first = complete(server, body)
    before = metrics(server)
    second = complete(server, body)
    after = metrics(server)
    if not first or not second:
        return
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    reused = after["activekv_prefix_reused_tokens_total"] - before["activekv_prefix_reused_tokens_total"]
    print(f"reuse: first cached {first['usage']['prompt_tokens_details']['cached_tokens']}, second cached {cached}, "
          f"/metrics reused +{reused:.0f}", flush=True)
    check(cached > 0, f"a repeated prompt reused nothing: {second['usage']}")
    check(cached == reused, f"cached_tokens {cached} != activekv_prefix_reused_tokens_total increase {reused}")
    check(cached < second["usage"]["prompt_tokens"], "the whole prompt was reused (the last page is recomputed)")
    check(second["choices"][0]["text"] == first["choices"][0]["text"], "the reused turn's text differs")
    check(after["activekv_retained_histories"] >= 0 and after["activekv_retained_dropped_total"] >= 0,
          "retained history gauges missing")


def check_stop_string_counts_as_finished(server):
    """A request ended by a stop string: the client gets finish_reason "stop", /metrics counts it finished."""
    body = {"prompt": "stop string probe " * 4, "max_tokens": 40, "temperature": 0}
    full = complete(server, body)
    if not full:
        return
    text = full["choices"][0]["text"]
    # The fake engine's tokens are bytes, not all of them text: cut at a printable ASCII character.
    stop = next((ch for ch in text[1:] if ch.isascii() and ch.isalnum() and text.find(ch) > 0), "")
    check(stop != "", f"no stop string to cut at in {text!r}")
    if not stop:
        return
    before = metrics(server)
    cut = complete(server, {**body, "stop": [stop]})
    after = metrics(server)
    if not cut:
        return
    check(cut["choices"][0]["finish_reason"] == "stop" and cut["choices"][0]["text"] == text[:text.find(stop)],
          f"stop {stop!r}: {cut['choices'][0]}")
    finished = after["activekv_requests_total{outcome=finished}"] - before["activekv_requests_total{outcome=finished}"]
    cancelled = after["activekv_requests_total{outcome=cancelled}"] - before["activekv_requests_total{outcome=cancelled}"]
    check(finished == 1 and cancelled == 0, f"a stop string counted finished +{finished}, cancelled +{cancelled}")


def check_nonstreamed_disconnect(server):
    """A non-streamed request whose client closes the connection is cancelled, not run to its end."""
    before = metrics(server)
    body = json.dumps({"prompt": "a long answer nobody waits for", "max_tokens": 4000, "temperature": 0})
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    time.sleep(0.4)  # running now: 4,000 steps of at least 1 ms are 4 s or more
    sock.close()
    t0 = time.time()
    while time.time() - t0 < 10:
        m = metrics(server)
        if m["activekv_requests_running"] == 0 and m["activekv_requests_waiting"] == 0:
            break
        time.sleep(0.05)
    took = time.time() - t0
    cancelled = m["activekv_requests_total{outcome=cancelled}"] - before["activekv_requests_total{outcome=cancelled}"]
    finished = m["activekv_requests_total{outcome=finished}"] - before["activekv_requests_total{outcome=finished}"]
    print(f"non-streamed disconnect: cancelled +{cancelled:.0f}, finished +{finished:.0f}, ended {took:.2f} s after "
          f"the close", flush=True)
    check(cancelled == 1 and finished == 0,
          f"a non-streamed request whose client left: cancelled +{cancelled}, finished +{finished}")


def check_bad_requests(server):
    ok_chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    cases = [
        ("malformed JSON", "/v1/chat/completions", "{not json", 400, "body"),
        ("wrong type", "/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
        ("missing messages", "/v1/chat/completions", {"model": "fake"}, 400, "messages"),
        ("unknown role", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
        ("max_tokens 0", "/v1/chat/completions", {**ok_chat, "max_tokens": 0}, 400, "max_tokens"),
        ("max_tokens negative", "/v1/chat/completions", {**ok_chat, "max_tokens": -5}, 400, "max_tokens"),
        ("max_tokens huge", "/v1/chat/completions", {**ok_chat, "max_tokens": 10**12}, 400, "max_tokens"),
        ("prompt + max_tokens over the context", "/v1/completions", {"prompt": "x" * 8000, "max_tokens": 500}, 400,
         "max_tokens"),
        ("temperature out of range", "/v1/chat/completions", {**ok_chat, "temperature": 7}, 400, "temperature"),
        ("temperature NaN", "/v1/chat/completions",
         '{"messages":[{"role":"user","content":"x"}],"temperature":NaN}', 400, "body"),
        ("top_p out of range", "/v1/chat/completions", {**ok_chat, "top_p": 0}, 400, "top_p"),
        ("top_p wrong type", "/v1/chat/completions", {**ok_chat, "top_p": "all"}, 400, "top_p"),
        ("body over the limit", "/v1/completions", json.dumps({"prompt": "y" * (2 << 20)}), 413, "body"),
        ("nested too deep", "/v1/completions", '{"prompt":"x","a":' + "[" * 5000 + "]" * 5000 + "}", 400, "body"),
        ("unknown model", "/v1/chat/completions", {**ok_chat, "model": "gpt-9"}, 404, "model"),
        ("unknown path", "/v1/nothing", ok_chat, 404, "path"),
    ]
    for name, path, body, status, field in cases:
        got, _, payload = server.request("POST", path, body)
        try:
            err = json.loads(payload)["error"]
        except Exception:  # noqa: BLE001
            err = {}
        check(got == status, f"{name}: status {got}, expected {status} ({payload[:200]!r})")
        check(err.get("param") == field and field in err.get("message", ""),
              f"{name}: error does not name {field}: {err}")
        check(err.get("type") is not None, f"{name}: error without a type")
    for method, path in [("GET", "/v1/chat/completions"), ("DELETE", "/v1/completions"), ("POST", "/health")]:
        got, headers, payload = server.request(method, path)
        check(got == 405 and "Allow" in headers and json.loads(payload)["error"]["param"] == "method",
              f"{method} {path}: {got} {payload[:200]!r}")
    got, _, _ = server.request("GET", "/health")
    check(got == 200, "/health after bad requests")
    got, _, payload = server.request("POST", "/v1/chat/completions", ok_chat)
    check(got == 200 and json.loads(payload)["usage"]["completion_tokens"] == 3, "a normal completion after bad requests")
    got, _, payload = server.request("GET", "/v1/models")
    check(got == 200 and json.loads(payload)["data"][0]["id"] == "fake", "/v1/models")
    got, _, payload = server.request("GET", "/v1/activekv/plan")
    check(got == 200 and "histories" in json.loads(payload), "/v1/activekv/plan")


def check_explain(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "z" * 300, "max_tokens": 4000, "stream": True}),
                 headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    rid = res.getheader("X-Request-Id")
    for _ in range(4):
        res.readline()
    time.sleep(0.3)  # past the pages sampling interval
    got, _, payload = server.request("GET", f"/v1/activekv/explain/{rid}")
    x = json.loads(payload)
    check(got == 200 and x["state"] in ("prefill", "decode") and x["pages"]["held"] >= x["pages"]["floor"] > 0,
          f"explain of a running request: {x}")
    check("resident_because" in x.get("pages", {}), f"explain has no reasons: {x}")
    conn.close()
    got, _, _ = server.request("GET", "/v1/activekv/explain/cmpl-999999")
    check(got == 404, "explain of an unknown id")


def check_shutdown(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/completions",
                 body=json.dumps({"prompt": "long", "max_tokens": 3000, "stream": True}),
                 headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    res.readline()
    t0 = time.time()
    code, out = server.stop()
    took = time.time() - t0
    rest = res.read().decode(errors="replace")
    print(out[-1500:], flush=True)
    check(code == 0, f"exit code {code} after SIGTERM")
    check(took < 10, f"shutdown took {took:.1f} s with a 0.3 s grace period")
    check("cancelled before it finished" in rest, "the long request was not told it was cancelled")
    check("every page and history back: yes" in out, "the summary does not say every page and history came back")
    check("allocations after warm-up: device 0, heap 0" in out, "the summary shows allocations after warm-up")
    check(" cancelled, " in out and "requests " in out, "no run summary printed")


def check_cli(binary):
    import subprocess
    for args, field in [(["--max-queue", "-3"], "--max-queue"), (["--port", "70000"], "--port"),
                        (["--grace", "-1"], "--grace"), (["--engine", "gpt"], "--engine"),
                        (["--host", "256.1.1.1"], "--port")]:
        base = [] if "--engine" in args else ["--engine", "fake"]
        r = subprocess.run([binary, "serve", *base, *args], capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and field in r.stderr and "activekv serve:" in r.stderr,
              f"serve {args}: exit {r.returncode}, stderr {r.stderr.strip()!r}")


def main():
    binary = binary_from_argv(sys.argv)
    check_cli(binary)
    server = Server(binary, ["--engine", "fake", "--fake-step-ms", "1", "--max-queue", "30", "--grace", "0.3",
                             "--http-threads", "96"])
    try:
        counts, cached_tokens = load(server)
        check_metrics(server, counts, cached_tokens)
        check_reuse(server)
        check_stop_string_counts_as_finished(server)
        check_nonstreamed_disconnect(server)
        check_bad_requests(server)
        check_explain(server)
        check_shutdown(server)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    if failures:
        print(f"{len(failures)} failures", flush=True)
        return 1
    print("serve_load_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
