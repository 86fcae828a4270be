#!/usr/bin/env python3
"""readme_test.py — the README's example commands, run as the README shows them.

    readme_test.py path/to/activekv [path/to/README.md]

Every ```sh block of the README that follows a `<!-- readme-test: run -->` line is run whole,
with `bash -e -o pipefail`, in a fresh directory where `build/release/src/cli/activekv` is the
binary under test (so `B=build/release/src/cli/activekv` and relative paths such as `out/run`
work as shown). One substitution only: the server's port 8080 becomes a free port, so the test
cannot meet another server on this machine. A block that ends with `kill %1` also waits for
that job: the server must exit 0 after SIGTERM, as the README says.

Checks, besides every command's exit status: the chat answer names Paris; `run` wrote a
report with 3 requests; `sim --out` wrote its page; the server streamed, counted its requests on
/metrics and answered the openai client. The blocks that are not run (the long commands:
scripts/run.sh, scripts/test.sh, the fuzz and swarm scripts) must still name scripts that exist
and are executable, and the README must begin with scripts/run.sh and scripts/test.sh.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

MARK = "<!-- readme-test: run -->"
BLOCK_SECONDS = 420  # the run block on a loaded 2-core machine: ~1-3 min; the server block ~1 min


def blocks(text):
    """(run?, body) for every ```sh block, in order."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            marked = any(lines[k].strip() == MARK for k in range(max(0, i - 2), i))
            out.append((marked, "\n".join(lines[i + 1:j])))
            i = j
        i += 1
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def main():
    binary = os.path.abspath(sys.argv[1])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    readme = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "README.md")
    text = open(readme).read()
    all_blocks = blocks(text)
    if not all_blocks:
        fail(f"{readme}: no ```sh block")

    # The README begins with the two commands.
    first = [l.split()[0] for l in all_blocks[0][1].split("\n") if l.strip()]
    opening = [l.strip() for l in text.split("\n") if l.strip()][:2]
    if first[:2] != ["scripts/run.sh", "scripts/test.sh"] or not opening[0].startswith("# ") or opening[1] != "```sh":
        fail(f"the README must open, under its title, with a block of scripts/run.sh and scripts/test.sh; got {first[:2]}")

    # Blocks not run: every script they name exists and is executable.
    for marked, body in all_blocks:
        if marked:
            continue
        for script in re.findall(r"(?<![\w/.])(scripts/[\w.-]+)", body):
            path = os.path.join(root, script)
            if not os.access(path, os.X_OK):
                fail(f"the README names {script}, which is not an executable file")

    run_blocks = [body for marked, body in all_blocks if marked]
    if len(run_blocks) < 2:
        fail(f"expected the examples and the server block marked {MARK!r}, found {len(run_blocks)}")

    work = tempfile.mkdtemp(prefix="readme-test-")
    os.makedirs(os.path.join(work, "build", "release", "src", "cli"))
    os.symlink(binary, os.path.join(work, "build", "release", "src", "cli", "activekv"))
    port = str(free_port())
    outputs = []
    for n, body in enumerate(run_blocks, 1):
        script = body.replace("8080", port)
        if re.search(r"^kill %1", script, re.M):
            script += "\nwait %1\n"
        print(f"--- block {n}:\n{script}", flush=True)
        p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=BLOCK_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            out, _ = p.communicate()
            print(out)
            fail(f"block {n} ran past {BLOCK_SECONDS} s")
        print(out, flush=True)
        if p.returncode != 0:
            fail(f"block {n} exited {p.returncode}")
        outputs.append(out)

    examples, server = outputs[0], outputs[1]
    if "Paris" not in examples:
        fail("the examples' `generate --chat` did not answer Paris")
    report = os.path.join(work, "out", "run", "report.json")
    if not os.path.exists(report):
        fail("`run --report out/run` wrote no out/run/report.json")
    requests = json.load(open(report)).get("request_list", [])
    if len(requests) != 3:
        fail(f"`run --max-requests 3` reported {len(requests)} requests")
    if not any(f.endswith(".html") for f in os.listdir(os.path.join(work, "out", "sim"))):
        fail("`sim --quick --out out/sim` wrote no page")
    if server.count("Paris") < 2:
        fail("the server block's chat completion and openai client did not both answer Paris")
    for needle, what in (("data: ", "the streamed completion"),
                         ("activekv_requests", "/metrics")):
        if needle not in server:
            fail(f"the server block's output lacks {needle!r} ({what})")
    print("README examples: every block ran as shown")


if __name__ == "__main__":
    main()
