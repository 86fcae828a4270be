#!/usr/bin/env python3
"""alloc_failure_test.py — allocation failure injected at warm-up (ctest: hostile_alloc_failure_test).

Runs `activekv generate` and `activekv run` on a tiny generated model with the
process's address space limited (RLIMIT_AS, set in the child before exec) to
sizes that let the program and the model load but not the memory it sizes at
warm-up (the host pool, the device arena, the engine's buffers). Each run must
end with exit 0 (it fitted) or a clear refusal: exit 1 or 2 and ONE line on
stderr that says what could not be allocated — never a signal (std::bad_alloc
reaching std::terminate is SIGABRT), never a hang. At least one limit must
produce the refusal, or the test proves nothing and fails.

Sanitizer builds reserve terabytes of shadow address space, so an address-space
limit means nothing there: with --sanitized the test exits 77 (ctest: skipped).

Usage: alloc_failure_test.py path/to/activekv [--sanitized]
"""
import os
import resource
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_model  # noqa: E402

MiB = 1 << 20


def limited(limit):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def main():
    binary = sys.argv[1]
    if "--sanitized" in sys.argv[2:]:
        print("skip: a sanitizer build reserves shadow memory; RLIMIT_AS cannot inject failure there")
        return 77
    failures, refusals, at_warm_up = [], 0, 0
    with tempfile.TemporaryDirectory(prefix="alloc") as tmp:
        model = tiny_model.write(os.path.join(tmp, "tiny.gguf"))
        trace = os.path.join(tmp, "trace.jsonl")
        with open(trace, "w") as f:
            f.write('{"arrival_s": 0, "prompt_tokens": [1, 2, 3], "max_tokens": 2}\n')
        config = os.path.join(tmp, "config.json")
        with open(config, "w") as f:
            f.write('{"host_pool": "512MiB", "device_pool": "256MiB", "page_tokens": 16, "tile_tokens": 64, "tiles": 2, '
                    '"max_context": 256, "max_seqs": 2, "step_tokens": 64, "prefill_chunk_tokens": 32, "threads": 1}')
        commands = {
            "generate": [binary, "generate", "--model", model, "--prompt", "hello", "--max-tokens", "2",
                         "--host-pool", "512MiB", "--device-pool", "256MiB", "--threads", "1"],
            "run": [binary, "run", "--model", model, "--config", config, "--trace", trace],
        }
        for name, args in commands.items():
            for limit_mib in (96, 160, 256, 384, 640):
                try:
                    p = subprocess.run(args, capture_output=True, text=True, timeout=60, errors="replace",
                                       preexec_fn=limited(limit_mib * MiB))
                except subprocess.TimeoutExpired:
                    failures.append(f"{name} under {limit_mib} MiB: timed out")
                    continue
                err = p.stderr.strip()
                lines = [line for line in err.splitlines() if line.strip()]
                label = f"{name} under RLIMIT_AS {limit_mib} MiB"
                if p.returncode == 0:
                    print(f"ok   {label}: ran (exit 0)")
                elif p.returncode in (1, 2) and len(lines) == 1 and (
                        "memory" in err or "allocat" in err or "map" in err or "pool" in err):
                    refusals += 1
                    at_warm_up += "while allocating the host pool, the device arena" in err
                    print(f"ok   {label}: refused (exit {p.returncode}): {err}")
                else:
                    failures.append(f"{label}: exit {p.returncode}, stderr {err[:500]!r}")
    if at_warm_up == 0:
        failures.append("no limit produced a refusal at warm-up: the test injected no failure there")
    for f in failures:
        print("FAIL " + f)
    print(f"{refusals} refusals ({at_warm_up} at warm-up), {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
