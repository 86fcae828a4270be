"""serve_mixed_load.py — the mixed load of issue 24 against a running `activekv serve`, and what it must give back.

Shared by serve_stress_test.py (bounded, in the suite) and scripts/serve-soak.sh
(the same load for N minutes beside a CPU hog). Every client draws, from its own
seeded generator, one of these per request:

- greedy (temperature 0) chat or completion, streamed or not, through the
  official `openai` client or raw HTTP (http.client, server-sent events parsed
  here). Prompts come from a small set that repeats across requests and shares
  prefixes (a base text, the base plus a suffix, a two-turn conversation over
  the base), so retained prefixes are adopted. The text must equal the same
  request's text sent alone (references(), run before the load);
- a streamed request whose client closes the connection after the first bytes
  (a counting prompt whose greedy answer alone runs to max_tokens, so the
  server can only end it by the cancel);
- a malformed body (each must get 400 naming its field).

A 429 (queue full) is an outcome too. The tally says what was sent and what
came back; expected_outcomes() is what /metrics' activekv_requests_total must
have grown by.
"""
import http.client
import json
import random
import socket
import threading
import time

import openai

WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
         "government company number group problem fact river mountain garden window letter music water paper story "
         "morning evening city country market school table light sound colour animal bird tree flower stone road "
         "friend family house door kitchen bread apple orange summer winter spring autumn journey question answer "
         "reason memory picture language history science number engine bridge harbour island forest desert").split()

COUNTING = "Count on: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"
MALFORMED = [
    ("/v1/chat/completions", b"{not json", "body"),
    ("/v1/chat/completions", json.dumps({"max_tokens": 4}).encode(), "messages"),
    ("/v1/chat/completions", json.dumps({"messages": "hello"}).encode(), "messages"),
    ("/v1/completions", json.dumps({"prompt": "x", "temperature": 9}).encode(), "temperature"),
    ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 0}).encode(), "max_tokens"),
    ("/v1/completions", json.dumps({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}).encode(), "stop"),
]


def make_jobs(seed, bases, words_min, words_max, max_tokens):
    """The greedy jobs: (kind, body without stream) from `bases` base texts; each repeats and shares prefixes."""
    rng = random.Random(seed)
    jobs = []
    for b in range(bases):
        base = " ".join(rng.choice(WORDS) for _ in range(rng.randint(words_min, words_max)))
        suffix = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        jobs.append(("completion", {"prompt": base, "max_tokens": max_tokens}))
        jobs.append(("completion", {"prompt": base + " " + suffix, "max_tokens": max_tokens}))
        jobs.append(("chat", {"messages": [{"role": "user", "content": "Summarise: " + base}], "max_tokens": max_tokens}))
        jobs.append(("chat", {"messages": [{"role": "user", "content": "Summarise: " + base},
                                           {"role": "assistant", "content": "It is about " + suffix + "."},
                                           {"role": "user", "content": "Say more in one sentence."}],
                              "max_tokens": max_tokens}))
    return jobs


def job_key(kind, body):
    return json.dumps([kind, body], sort_keys=True)


def path_of(kind):
    return "/v1/chat/completions" if kind == "chat" else "/v1/completions"


def raw_post(port, path, body, timeout=600):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=body if isinstance(body, bytes) else json.dumps(body),
                 headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    return conn, res


def text_of(kind, payload):
    choice = payload["choices"][0]
    return choice["message"]["content"] if kind == "chat" else choice["text"]


def references(port, jobs, disconnect_tokens):
    """Every job sent alone, one after another: {key: (text, finish_reason)}; and the counting prompt's finish."""
    ref = {}
    for kind, body in jobs:
        conn, res = raw_post(port, path_of(kind), {**body, "temperature": 0})
        payload = json.loads(res.read())
        conn.close()
        if res.status != 200:
            raise RuntimeError(f"reference request answered {res.status}: {payload}")
        ref[job_key(kind, body)] = (text_of(kind, payload), payload["choices"][0]["finish_reason"])
    conn, res = raw_post(port, "/v1/completions", {"prompt": COUNTING, "max_tokens": disconnect_tokens, "temperature": 0})
    payload = json.loads(res.read())
    conn.close()
    return ref, payload["choices"][0]["finish_reason"]


class Tally:
    """What was sent and what came back, shared by the clients."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = {}       # mode -> count
        self.outcomes = {}   # outcome -> count
        self.differing = []  # (mode, key, expected, got)
        self.errors = []     # (mode, what)

    def add(self, mode, outcome, detail=None):
        with self.lock:
            self.sent[mode] = self.sent.get(mode, 0) + 1
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            if outcome == "differs":
                self.differing.append((mode, *detail))
            elif outcome == "error":
                self.errors.append((mode, detail))

    def expected_outcomes(self):
        """What activekv_requests_total{outcome} must have grown by."""
        o = self.outcomes
        return {"finished": o.get("equal", 0) + o.get("differs", 0), "cancelled": o.get("disconnected", 0),
                "queue_full": o.get("queue_full", 0), "bad_request": o.get("bad_request", 0), "rejected": 0}

    def lines(self):
        out = ["sent:      " + ", ".join(f"{k} {v}" for k, v in sorted(self.sent.items())),
               "came back: " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))]
        for mode, key, want, got in self.differing[:10]:
            out.append(f"DIFFERS ({mode}) {key[:120]}\n  alone:     {want!r}\n  under load: {got!r}")
        for mode, what in self.errors[:10]:
            out.append(f"ERROR ({mode}) {what}")
        return out


def sse_text(kind, res):
    """The text of a raw streamed answer (server-sent events), and whether [DONE] came."""
    pieces, done = [], False
    for line in res:
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            done = True
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(f"stream error: {chunk['error']}")
        for c in chunk.get("choices", []):
            pieces.append(c.get("delta", {}).get("content") or "" if kind == "chat" else c.get("text") or "")
    return "".join(pieces), done


def greedy_openai(client, model, kind, body, stream):
    args = dict(model=model, temperature=0, max_tokens=body["max_tokens"])
    if kind == "chat":
        if not stream:
            return client.chat.completions.create(messages=body["messages"], **args).choices[0].message.content
        s = client.chat.completions.create(messages=body["messages"], stream=True, **args)
        return "".join(c.choices[0].delta.content or "" for c in s if c.choices)
    if not stream:
        return client.completions.create(prompt=body["prompt"], **args).choices[0].text
    s = client.completions.create(prompt=body["prompt"], stream=True, **args)
    return "".join(c.choices[0].text or "" for c in s if c.choices)


def greedy_raw(port, kind, body, stream):
    """(status, text)."""
    conn, res = raw_post(port, path_of(kind), {**body, "temperature": 0, "stream": stream})
    try:
        if res.status != 200:
            res.read()
            return res.status, None
        if stream:
            text, done = sse_text(kind, res)
            if not done:
                raise RuntimeError("a stream ended without [DONE]")
            return 200, text
        return 200, text_of(kind, json.loads(res.read()))
    finally:
        conn.close()


def disconnect(port, tokens):
    """A streamed request closed after its first bytes: 'disconnected', or 'queue_full' on 429."""
    body = json.dumps({"prompt": COUNTING, "max_tokens": tokens, "temperature": 0, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=600) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        data = b""
        while b"\r\n\r\n" not in data or (b" 200 " in data.split(b"\r\n")[0] and b"data: " not in data):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    status = data.split(b"\r\n")[0]
    if b" 429 " in status:
        return "queue_full"
    return "disconnected" if b" 200 " in status else f"error: {status!r}"


def malformed(port, rng):
    path, body, field = rng.choice(MALFORMED)
    conn, res = raw_post(port, path, body)
    payload = res.read()
    conn.close()
    try:
        param = json.loads(payload)["error"]["param"]
    except Exception:  # noqa: BLE001
        param = None
    if res.status == 400 and param == field:
        return "bad_request", None
    return "error", f"{path} {body[:60]!r}: {res.status} {payload[:200]!r}"


def client_loop(port, model, seed, jobs, ref, tally, requests, disconnect_tokens, stop=None):
    """One client: `requests` requests (or, with `stop`, until it is set), each drawn from its own generator."""
    rng = random.Random(seed)
    oa = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=600)
    n = 0
    while (n < requests) if stop is None else not stop.is_set():
        n += 1
        r = rng.random()
        try:
            if r < 0.08:
                outcome = disconnect(port, disconnect_tokens)
                tally.add("disconnect", outcome if not outcome.startswith("error") else "error",
                          outcome if outcome.startswith("error") else None)
                continue
            if r < 0.16:
                outcome, what = malformed(port, rng)
                tally.add("malformed", outcome, what)
                continue
            kind, body = rng.choice(jobs)
            stream = rng.random() < 0.5
            use_openai = rng.random() < 0.5
            mode = f"{'openai' if use_openai else 'raw'}-{kind}-{'stream' if stream else 'plain'}"
            want = ref[job_key(kind, body)][0]
            if use_openai:
                try:
                    got = greedy_openai(oa, model, kind, body, stream)
                except openai.RateLimitError:
                    tally.add(mode, "queue_full")
                    continue
            else:
                status, got = greedy_raw(port, kind, body, stream)
                if status == 429:
                    tally.add(mode, "queue_full")
                    continue
                if status != 200:
                    tally.add(mode, "error", f"status {status}")
                    continue
            if got == want:
                tally.add(mode, "equal")
            else:
                tally.add(mode, "differs", (job_key(kind, body), want, got))
        except Exception as e:  # noqa: BLE001  (a refused connection, a reset: the server may have died)
            tally.add("exception", "error", f"{type(e).__name__}: {e}")


def start_load(port, model, jobs, ref, clients, requests, seed, disconnect_tokens, stop=None):
    """The clients' threads, started, and their tally."""
    tally = Tally()
    threads = [threading.Thread(target=client_loop,
                                args=(port, model, seed * 1000 + k, jobs, ref, tally, requests, disconnect_tokens, stop))
               for k in range(clients)]
    for t in threads:
        t.start()
    return threads, tally


def run_load(port, model, jobs, ref, clients, requests, seed, disconnect_tokens):
    threads, tally = start_load(port, model, jobs, ref, clients, requests, seed, disconnect_tokens)
    for t in threads:
        t.join()
    return tally


def metric_values(port):
    from prometheus_client.parser import text_string_to_metric_families
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    return {s.name + str(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(body) for s in f.samples}


def outcome_counts(m):
    return {o: m.get(f"activekv_requests_total[('outcome', '{o}')]", 0)
            for o in ("finished", "cancelled", "queue_full", "bad_request", "rejected")}


def wait_idle(port, seconds=60):
    """Waits until nothing runs or waits; the metrics then."""
    end = time.time() + seconds
    while True:
        m = metric_values(port)
        if (m["activekv_requests_running[]"] == 0 and m["activekv_requests_waiting[]"] == 0) or time.time() > end:
            return m
        time.sleep(0.1)
