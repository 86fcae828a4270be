"""serve_harness.py — start `activekv serve` on a free loopback port, talk to it, stop it (for the tests).

The server is started with --port 0 (the kernel picks a free port on
127.0.0.1; or the port given) and the port is read from its "listening on" line. stop() sends
SIGTERM and returns the exit code and everything it printed.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time


class Server:
    def __init__(self, binary, args, ready_timeout=120, port=0):
        self.proc = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", str(port), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.port = None
        deadline = time.time() + ready_timeout
        while self.port is None:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("activekv serve exited before listening:\n" + "".join(self.lines))
            self.lines.append(line)
            m = re.match(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if time.time() > deadline:
                raise RuntimeError("activekv serve did not start in time")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def url(self, path=""):
        return f"http://127.0.0.1:{self.port}{path}"

    def request(self, method, path, body=None, headers=None, timeout=120):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        conn.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
        res = conn.getresponse()
        payload = res.read()
        conn.close()
        return res.status, dict(res.getheaders()), payload

    def stop(self, sig=signal.SIGTERM, timeout=60):
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code, "".join(self.lines)


def free_port():
    """A loopback port free now (for a test that must know the port before the server says it listens)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary_from_argv(argv):
    if len(argv) < 2 or not os.access(argv[1], os.X_OK):
        raise SystemExit("usage: test.py path/to/activekv")
    return argv[1]
