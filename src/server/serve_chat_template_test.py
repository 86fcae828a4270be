#!/usr/bin/env python3
"""serve_chat_template_test.py — `/v1/chat/completions` speaks each model's own chat format.

Small random-weight Llama files are written here with the `gguf` package, each with
the default model's vocabulary (plus the control tokens of the other families) and
one real tokenizer.chat_template from the llama.cpp source package (Qwen2.5's
ChatML, Llama 3.1, Gemma 2, Mistral Nemo; Phi-3.5's, which ActiveKV does not
render; and none, a base model). Every file's weights make one token the greedy
choice at every position (one layer whose outputs are zero, every embedding the
same vector, an output matrix whose only non-zero row is that token's), so what
ends a generation is visible from outside:

1. A recognised template: the chat request's prompt is the `jinja2` rendering of
   the same messages (a completion of that rendered text gets the same prompt
   token count and adopts the chat's retained prefix), and generation stops at
   once on the family's end token (ChatML <|im_end|>, Llama 3 <|eot_id|> named by
   tokenizer.ggml.eot_token_id, Gemma <end_of_turn>, Mistral's EOS </s>), chats and
   completions alike. Gemma 2's refusal of a system message is a 400.
2. An unrecognised template: chat answers 400 naming it (its first characters)
   and pointing at /v1/completions; completions work and run to max_tokens (the
   greedy token is an ordinary one).
3. No template: chat answers 400 saying the model has none; completions work.

Each server is real, on 127.0.0.1, started here. Needs numpy, gguf, jinja2 and
the template files (scripts/install-deps.sh --test); fails, never skips, without them.
"""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "tokenizer"))
import compare_chat_templates as cct  # noqa: E402  (the jinja2 reference and where the templates are)

try:
    import numpy as np
    from gguf import GGUFWriter
except ImportError as e:
    sys.exit(f"FAIL: {e}; install the test packages with scripts/install-deps.sh --test")

from serve_harness import Server, binary_from_argv  # noqa: E402

EXTRA_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<s>", "</s>", "[INST]", "[/INST]"]
ORDINARY = 1000  # an ordinary token of the default vocabulary: the greedy choice where nothing should stop
# name -> (template file or None, bos, eos, eot key or None, the greedy token, the family's stop)
MODELS = {
    "chatml": ("Qwen-Qwen2.5-7B-Instruct.jinja", "<|endoftext|>", "<|endoftext|>", None, "<|im_end|>"),
    "llama3": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|eot_id|>"),
    "gemma": ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>", None, "<end_of_turn>"),
    "mistral": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", None, "</s>"),
    "unrecognised": ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "</s>", None, None),
    "base": (None, "<s>", "</s>", None, None),
}
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is a KV cache? Say it briefly."}]
MAX_TOKENS = 6
EMBEDDING = 64
failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def read_tokenizer_keys(path):
    """The tokenizer.* keys of a GGUF file's metadata, parsed directly (GGUFReader takes seconds on a
    49,152-token vocabulary): GGUF v3, little-endian, the key-value section after the header."""
    import struct
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # the metadata is at the start; SmolLM2's is ~2 MiB
    pos = 0

    def take(fmt):
        nonlocal pos
        out = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return out[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n:pos].decode("utf-8")

    scalars = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(vtype):
        if vtype == 8:
            return string()
        if vtype == 9:
            item, count = take("I"), take("Q")
            return [value(item) for _ in range(count)]
        return take(scalars[vtype])

    if take("I") != 0x46554747 or take("I") != 3:
        sys.exit(f"FAIL: {path} is not a GGUF v3 file")
    take("Q")  # tensors
    keys = {}
    for _ in range(take("Q")):
        key = string()
        v = value(take("I"))
        if key.startswith("tokenizer."):
            keys[key] = v
    return keys


def read_vocabulary(path):
    keys = read_tokenizer_keys(path)
    tokens = list(keys["tokenizer.ggml.tokens"])
    types = list(keys["tokenizer.ggml.token_type"])
    merges = list(keys["tokenizer.ggml.merges"])
    pre = keys["tokenizer.ggml.pre"]
    for t in EXTRA_TOKENS:
        if t not in tokens:
            tokens.append(t)
            types.append(3)  # control
    return tokens, types, merges, pre


def write_model(path, vocab, template, bos, eos, eot, greedy):
    tokens, types, merges, pre = vocab
    ids = {t: i for i, t in enumerate(tokens)}
    w = GGUFWriter(path, "llama")
    w.add_name("random llama, one greedy token")
    w.add_block_count(1)
    w.add_context_length(512)
    w.add_embedding_length(EMBEDDING)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(EMBEDDING // 4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_bos_token_id(ids[bos])
    w.add_eos_token_id(ids[eos])
    if eot is not None:
        w.add_uint32("tokenizer.ggml.eot_token_id", ids[eot])
    if template is not None:
        w.add_chat_template(template)
    vocab_size = len(tokens)
    w.add_vocab_size(vocab_size)
    w.add_tensor("token_embd.weight", np.ones((vocab_size, EMBEDDING), dtype=np.float16))
    out = np.zeros((vocab_size, EMBEDDING), dtype=np.float16)
    out[greedy if isinstance(greedy, int) else ids[greedy]] = 1.0
    w.add_tensor("output.weight", out)
    w.add_tensor("output_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
    b = "blk.0."
    w.add_tensor(b + "attn_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
    w.add_tensor(b + "ffn_norm.weight", np.ones(EMBEDDING, dtype=np.float32))
    for name, rows, cols in (("attn_q", EMBEDDING, EMBEDDING), ("attn_k", 32, EMBEDDING), ("attn_v", 32, EMBEDDING),
                             ("attn_output", EMBEDDING, EMBEDDING), ("ffn_gate", 64, EMBEDDING),
                             ("ffn_up", 64, EMBEDDING), ("ffn_down", EMBEDDING, 64)):
        w.add_tensor(b + name + ".weight", np.zeros((rows, cols), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def post(server, path, body):
    status, _, payload = server.request("POST", path, body)
    return status, json.loads(payload)


def check_model(binary, name, model, config, spec):
    template_file, bos, eos, eot, stop = spec
    server = Server(binary, ["--model", model, "--config", config])
    try:
        print(f"--- {name}: {''.join(l for l in server.lines if l.startswith('chat'))}", end="", flush=True)
        status, chat = post(server, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0})
        if stop is not None and name != "gemma":
            check(status == 200, f"{name}: chat answers 200 ({status} {chat})")
            choice = chat.get("choices", [{}])[0]
            check(choice.get("finish_reason") == "stop" and chat["usage"]["completion_tokens"] == 0 and
                  choice["message"]["content"] == "", f"{name}: chat stops at once on {stop} ({chat.get('usage')}, {choice})")
        if name == "gemma":  # Gemma 2's template refuses a system message, and so does the server
            check(status == 400 and "system" in chat["error"]["message"], f"{name}: a system message is a 400 ({status} {chat})")
        if stop is not None:
            messages = MESSAGES[1:] if name == "gemma" else MESSAGES
            if name == "gemma":
                status, chat = post(server, "/v1/chat/completions", {"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0})
                check(status == 200 and chat["choices"][0]["finish_reason"] == "stop" and chat["usage"]["completion_tokens"] == 0,
                      f"{name}: chat without a system message stops at once on {stop} ({status} {chat})")
            with open(os.path.join(cct.vocab_dir(), "templates", template_file), encoding="utf-8") as f:
                rendered = cct.reference(f.read(), bos, eos, messages, True)
            check(isinstance(rendered, str), f"{name}: jinja2 renders the messages")
            status, comp = post(server, "/v1/completions", {"prompt": rendered, "max_tokens": MAX_TOKENS, "temperature": 0})
            usage = comp.get("usage", {})
            check(status == 200 and usage.get("prompt_tokens") == chat["usage"]["prompt_tokens"],
                  f"{name}: the jinja2 rendering as a completion has the chat's {chat['usage']['prompt_tokens']} prompt tokens ({usage})")
            check(usage.get("prompt_tokens_details", {}).get("cached_tokens", 0) > 0,
                  f"{name}: the rendering adopts the chat's retained prefix (the same ids): {usage}")
            check(comp["choices"][0]["finish_reason"] == "stop" and usage.get("completion_tokens") == 0,
                  f"{name}: a completion stops at once on {stop} too")
        else:
            check(status == 400, f"{name}: chat answers 400 ({status})")
            message = chat.get("error", {}).get("message", "")
            if name == "base":
                check("no chat template" in message and "/v1/completions" in message, f"{name}: the 400 says so: {message!r}")
            else:
                check("not one ActiveKV renders" in message and "{% for message in messages %}" in message and
                      "/v1/completions" in message, f"{name}: the 400 names the template: {message!r}")
            status, comp = post(server, "/v1/completions", {"prompt": "Hello there", "max_tokens": MAX_TOKENS, "temperature": 0})
            check(status == 200 and comp["choices"][0]["finish_reason"] == "length" and
                  comp["usage"]["completion_tokens"] == MAX_TOKENS, f"{name}: completions work ({status} {comp.get('usage')})")
    finally:
        code, out = server.stop()
        check(code == 0, f"{name}: the server exits 0 ({code})")
        if code != 0:
            print(out[-3000:])


def main():
    binary = binary_from_argv(sys.argv)
    find_model = os.path.join(here, "..", "..", "scripts", "find-model.sh")
    default_model = subprocess.run([find_model], capture_output=True, text=True).stdout.strip()
    if not default_model:
        sys.exit("FAIL: the default model is not installed (scripts/install-deps.sh installs it)")
    tdir = os.path.join(cct.vocab_dir(), "templates")
    if not os.path.isdir(tdir):
        sys.exit(f"FAIL: templates not found at {tdir} (scripts/install-deps.sh --test, or set ACTIVEKV_VOCAB_DIR)")
    vocab = read_vocabulary(default_model)
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "tiny.json")
        with open(config, "w") as f:
            json.dump({"host_pool": "8MiB", "prefix_cache": "1MiB", "device_pool": "2MiB", "page_tokens": 16,
                       "tile_tokens": 256, "tiles": 2, "max_context": 512, "max_seqs": 2, "step_tokens": 128,
                       "prefill_chunk_tokens": 64, "threads": 1, "stop_at_eos": False, "arrival_scale": 1.0,
                       "prefix_reuse": True, "retained_histories": 1, "max_queue": 4, "shutdown_grace_s": 2}, f)
        for name, spec in MODELS.items():
            template_file, bos, eos, eot, stop = spec
            template = None
            if template_file is not None:
                with open(os.path.join(tdir, template_file), encoding="utf-8") as f:
                    template = f.read()
            model = os.path.join(tmp, name + ".gguf")
            write_model(model, vocab, template, bos, eos, eot, stop if stop is not None else ORDINARY)
            check_model(binary, name, model, config, spec)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all chat template checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
