#!/usr/bin/env python3
"""serve_slow_clients_test.py — clients that send half a request and wait do not starve `activekv serve`.

Against `activekv serve --engine fake` (the connection gate, src/server/connection_gate.hpp):

1. One client address (127.0.0.2) opens 300 connections, each sending half a
   request header, and waits. The first --max-connections-per-client (64)
   are held by the gate, every one beyond gets a 503 naming the flag. Meanwhile
   /health from another address (127.0.0.1) answers within 100 ms, /metrics
   answers, and a normal completion (streamed and not) completes.
2. The held connections get a 408 naming --request-timeout once it passes
   (3 s here), and /metrics counts the refusals and time-outs exactly.
3. The total cap: with --max-connections 120 and 64 connections held from
   one address, a second address gets 56 and a 503 naming --max-connections beyond.
4. A body sent slowly in pieces still makes a whole request (answered once
   its last byte is in), a kept-alive connection serves several requests, and
   a request followed by a half-close is answered.
5. SIGTERM with connections still half-sent: exit 0, every page back.
"""
import json
import socket
import statistics
import sys
import time

from prometheus_client.parser import text_string_to_metric_families

from serve_harness import Server, binary_from_argv

HALF = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: appl"
ATTACK = 300
PER_CLIENT = 64
TOTAL = 120
TIMEOUT_S = 3
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def metrics(server):
    status, _, body = server.request("GET", "/metrics", timeout=10)
    assert status == 200
    return {s.name + str(sorted(s.labels.items())): s.value
            for f in text_string_to_metric_families(body.decode()) for s in f.samples}


def open_half(server, source, n):
    """n connections from `source`, each with half a header sent: the sockets."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", server.port))
        s.sendall(HALF)
        socks.append(s)
    return socks


def answer_of(s, wait_s):
    """The status line and body the server wrote on a socket within wait_s ('' if none, 'closed' if closed)."""
    s.settimeout(wait_s)
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    except OSError:
        return "closed", ""
    if not data:
        return "", ""
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body.decode(errors="replace")


def timed_health(server, n=20):
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        status, _, _ = server.request("GET", "/health", timeout=30)
        took.append(time.perf_counter() - t0)
        check(status == 200, f"/health status {status}")
    return took


def completion_ok(server, stream):
    body = {"prompt": "hello there", "max_tokens": 5, "stream": stream}
    t0 = time.perf_counter()
    status, _, payload = server.request("POST", "/v1/completions", body, timeout=30)
    took = time.perf_counter() - t0
    ok = status == 200 and (b"[DONE]" in payload if stream else json.loads(payload)["usage"]["completion_tokens"] == 5)
    return ok, took


def slow_body(server):
    """A request whose body arrives in three pieces 0.2 s apart: answered once whole."""
    body = json.dumps({"prompt": "abc", "max_tokens": 3}).encode()
    head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(head.encode())
        for i in range(0, len(body), len(body) // 3 + 1):
            time.sleep(0.2)
            s.sendall(body[i:i + len(body) // 3 + 1])
        status, payload = answer_of(s, 5)
    return status, payload


def half_closed(server):
    """A whole request, then the client closes its side: still answered (then the connection closes)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        return answer_of(s, 5)[0]


def keep_alive(server, n=3):
    """n requests on one connection, one after another: each answered."""
    answered = 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        f = s.makefile("rb")
        for _ in range(n):
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            status = f.readline()
            length = 0
            while True:
                line = f.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            f.read(length)
            answered += status.startswith(b"HTTP/1.1 200")
    return answered


def main():
    binary = binary_from_argv(sys.argv)
    server = Server(binary, ["--engine", "fake", "--fake-step-ms", "2", "--max-connections", str(TOTAL),
                             "--max-connections-per-client", str(PER_CLIENT), "--request-timeout", str(TIMEOUT_S)])
    try:
        base = timed_health(server, 5)
        t0 = time.perf_counter()
        held = open_half(server, "127.0.0.2", ATTACK)
        opened_s = time.perf_counter() - t0
        print(f"{ATTACK} half-sent connections opened in {opened_s:.2f} s", flush=True)
        check(opened_s < TIMEOUT_S / 2, f"opening {ATTACK} connections took {opened_s:.1f} s (the accept queue?)")
        took = timed_health(server)
        print(f"/health under {ATTACK} half-sent connections: median {statistics.median(took) * 1000:.1f} ms, "
              f"max {max(took) * 1000:.1f} ms (idle: max {max(base) * 1000:.1f} ms)", flush=True)
        check(max(took) < 0.1, f"/health took {max(took) * 1000:.0f} ms under the half-sent connections")
        m = metrics(server)
        for stream in (False, True):
            ok, t = completion_ok(server, stream)
            print(f"a {'streamed' if stream else 'plain'} completion under the half-sent connections: {t * 1000:.0f} ms",
                  flush=True)
            check(ok, f"a {'streamed' if stream else 'plain'} completion did not complete")
        refused = m["activekv_http_connections_refused_total[('cap', 'max_connections_per_client')]"]
        check(refused == ATTACK - PER_CLIENT, f"refused per client: {refused}, expected {ATTACK - PER_CLIENT}")
        check(m["activekv_http_connections_open[]"] >= PER_CLIENT, f"open {m['activekv_http_connections_open[]']}")

        answers = [answer_of(s, 0.2 if k >= PER_CLIENT else TIMEOUT_S + 3) for k, s in enumerate(held)]
        beyond = [a for a in answers[PER_CLIENT:]]
        check(all(a[0] == "HTTP/1.1 503 Service Unavailable" or a[0] == "closed" for a in beyond),
              f"beyond the per-client cap: {set(a[0] for a in beyond)}")
        check(any("--max-connections-per-client" in a[1] for a in beyond), "no 503 names --max-connections-per-client")
        timed = [a for a in answers[:PER_CLIENT]]
        check(all(a[0] == "HTTP/1.1 408 Request Timeout" and "--request-timeout" in a[1] for a in timed),
              f"held connections after {TIMEOUT_S} s: {set(a[0] for a in timed)}")
        for s in held:
            s.close()
        m = metrics(server)
        check(m["activekv_http_requests_timed_out_total[]"] == PER_CLIENT,
              f"timed out: {m['activekv_http_requests_timed_out_total[]']}, expected {PER_CLIENT}")

        # The total cap: 64 connections held from 127.0.0.2, then 127.0.0.3 gets what is left of TOTAL.
        first = open_half(server, "127.0.0.2", PER_CLIENT)
        second = open_half(server, "127.0.0.3", PER_CLIENT)
        got = [answer_of(s, 0.2) for s in second]
        refused_total = [a for a in got if a[0] in ("HTTP/1.1 503 Service Unavailable", "closed")]
        expected = 2 * PER_CLIENT - TOTAL
        check(len(refused_total) == expected, f"beyond --max-connections: {len(refused_total)} refused, expected {expected}")
        check(any("(--max-connections)" in a[1] for a in got), "no 503 names --max-connections")
        for s in first + second:
            s.close()
        time.sleep(0.3)
        m = metrics(server)
        got_total = m["activekv_http_connections_refused_total[('cap', 'max_connections')]"]
        check(got_total == expected, f"refused by the total cap: {got_total}, expected {expected}")

        status, payload = slow_body(server)
        check(status == "HTTP/1.1 200 OK" and json.loads(payload)["usage"]["completion_tokens"] == 3,
              f"a body sent in pieces: {status} {payload[:200]}")
        check(keep_alive(server) == 3, "three requests on one kept-alive connection")
        check(half_closed(server) == "HTTP/1.1 200 OK", "a request followed by a half-close was not answered")
        m = metrics(server)
        check(m["activekv_requests_total[('outcome', 'finished')]"] == 3, "finished count")
        check(m["activekv_heap_allocations_after_warmup[]"] == 0, "heap allocations after warm-up")

        lingering = open_half(server, "127.0.0.4", 10)
        code, out = server.stop()
        for s in lingering:
            s.close()
        print(out[-600:], flush=True)
        check(code == 0, f"exit code {code}")
        check("every page and history back: yes" in out, "not every page and history came back")
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    if failures:
        print(f"{len(failures)} failures", flush=True)
        return 1
    print("serve_slow_clients_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
