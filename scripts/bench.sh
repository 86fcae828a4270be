#!/usr/bin/env bash
# bench.sh — the headline table of docs/BENCHMARKS.md, measured on this machine, in one command.
#
#   scripts/bench.sh [--quick] [--out DIR] [--only AREA,...] [--no-peer] [--build-dir DIR]
#
#   --quick      shorter contexts, fewer rounds (each row names its command)
#   --out DIR    where the table goes: DIR/bench.md, DIR/bench.json, DIR/logs/ (default out/bench)
#   --only       some areas: peer, run, serve, reuse, tier, sparse-quality, sparse-speed, planner, copies
#   --no-peer    leave llama.cpp out even where its script exists
#
# Every area runs an existing program (engine_bench, activekv_runtime_bench, activekv_core_bench,
# activekv_backend_bench, `activekv run|eval`, scripts/serve-bench.py, scripts/bench-peer.sh,
# src/tier/tier_bench.py) and each row of the table carries that program's command line, the time
# it ran (UTC) and the machine (cores, CPU, load average before the row). The peer is llama.cpp's
# llama-bench, built once by ../shared/peer/llama-bench.sh (PEER_SCRIPT=PATH overrides; about 4
# minutes of 2 cores the first time, cached in ~/.cache/activekv-peer), alternated with this
# engine at each length, medians of the rounds. A row whose program fails says so and names its
# log; the others still run, and the exit status is 1.
#
# On a shared machine (load average well above the core count) absolute rates are the
# scheduler's: read the ratios of one row, and say the load when quoting a figure.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
out=out/bench
only=""
use_peer=1
build_dir=build/release
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --only) only=${2:?--only needs a list of areas}; shift 2 ;;
    --no-peer) use_peer=0; shift ;;
    --build-dir) build_dir=${2:?--build-dir needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown option '$1' (see scripts/bench.sh --help)" >&2; exit 2 ;;
  esac
done

areas=" peer run serve reuse tier sparse-quality sparse-speed planner copies "
for a in ${only//,/ }; do
  [[ $areas == *" $a "* ]] || { echo "bench.sh: --only $a: give some of:$areas" >&2; exit 2; }
done

model=$(scripts/find-model.sh) || { echo "bench.sh: the default model is not installed (scripts/find-model.sh; scripts/install-deps.sh installs it)" >&2; exit 1; }
targets=(activekv engine_bench activekv_runtime_bench activekv_core_bench activekv_backend_bench)
if [[ ! -f $build_dir/build.ninja && $build_dir == build/release ]]; then cmake --preset release >/dev/null; fi
echo "bench.sh: building ${targets[*]} where out of date (log: $build_dir/build-bench.log)"
if ! cmake --build "$build_dir" --target "${targets[@]}" -- -j"${JOBS:-2}" >"$build_dir/build-bench.log" 2>&1; then
  tail -n 30 "$build_dir/build-bench.log"
  exit 1
fi
peer=${PEER_SCRIPT:-../shared/peer/llama-bench.sh}
[[ $use_peer == 1 && -x $peer ]] || peer=""
mkdir -p "$out/logs"

python3 - "$quick" "$out" "$only" "$peer" "$build_dir" "$model" <<'EOF'
import json, os, re, statistics, subprocess, sys, time
quick, out, only, peer, build, model = sys.argv[1] == "1", sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
B = f"{build}/src/cli/activekv"
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
cores = os.cpu_count()
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "?"
rows, failed = [], []

def load():
    return os.getloadavg()[0]

def machine(l):
    return f"{cores} cores, {cpu}, load {l:.1f}"

def run(area, cmd, env=None):
    """Runs one command (a shell line, shown as is in the table), its output to logs/AREA.log; returns stdout."""
    log = os.path.join(out, "logs", f"{area}.log")
    print(f"bench.sh: {area}: {cmd}   (load {load():.1f})", flush=True)
    e = dict(os.environ, **(env or {}))
    p = subprocess.run(cmd, shell=True, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=e)
    with open(log, "a") as f:
        f.write(f"$ {cmd}\n{p.stdout}\n{p.stderr}\nexit {p.returncode}\n")
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode} (log: {log})")
    return p.stdout

def row(area, measure, ours, peer_cell="—", ratio="—", cmd="", when=None, l=None):
    rows.append({"area": area, "measure": measure, "activekv": ours, "peer": peer_cell, "ratio": ratio,
                 "command": cmd, "when_utc": when, "machine": machine(l), "load": round(l, 1)})

def now():
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime())

def med(xs):
    return statistics.median(xs)

# ---- the areas, in the table's order ----

def area_peer():
    lengths = ["512"] if quick else ["512,2048", "8000"]
    repeats = ["3"] if quick else ["3", "1"]
    for ls, r in zip(lengths, repeats):
        cmd = f"scripts/bench-peer.sh --lengths {ls} --repeat {r} --build-dir {build}" + (" --with-peer" if peer else "")
        t, l = now(), load()
        text = run("peer", cmd, {"PEER_SCRIPT": peer} if peer else None)
        for m in re.finditer(r"^\| (prefill [\d,]+ tokens|decode at [\d,]+) \| ([^|]+) \|(?: ([^|]+) \| ([^|]+) \|)?$",
                             text, re.M):
            ours = m.group(2).split()[0]
            pc = m.group(3).split()[0] if m.group(3) else ("—" if peer else "no peer (PEER_SCRIPT)")
            row("engine vs llama.cpp (tokens/s)", m.group(1), ours, pc, (m.group(4) or "—").strip(), cmd, t, l)

def area_run():
    cmd = f"{B} run {'--max-requests 3 ' if quick else ''}--report {out}/run"
    t, l = now(), load()
    run("run", cmd)
    f = json.load(open(f"{out}/run/report.json"))
    a = f["allocations_after_warmup"]
    row("main job (`activekv run`)", "default trace" + (", first 3 requests" if quick else ", 10 requests"),
        f"{f['run']['wall_s']:.1f} s; {f['throughput']['output_tokens_per_s']:.1f} output tok/s; "
        f"TTFT p50 {f['latency']['ttft_s']['p50']:.2f} s; allocations after warm-up {a['device']}/{a['heap']}",
        cmd=cmd, when=t, l=l)

def area_serve():
    cmd = f"scripts/serve-bench.py {B} --requests 1 --max-tokens 8 --rounds {3 if quick else 9}"
    t, l = now(), load()
    text = run("serve", cmd)
    ratio = re.search(r"throughput ratio serve/run ([\d.]+)", text).group(1)
    m = re.search(r"median added TTFT ms: http - sched ([+-][\d.]+).*client - sched ([+-][\d.]+)", text)
    row("server (`activekv serve`)", "added time to first token: client − scheduler, same request",
        f"{m.group(2)} ms (HTTP layer alone {m.group(1)} ms)", cmd=cmd, when=t, l=l)
    row("server (`activekv serve`)", "throughput, serve / run (1 request × 8 tokens)", ratio, cmd=cmd, when=t, l=l)

def follow_ups(path):
    f = json.load(open(path))
    res = {}
    for r in f["request_list"]:
        if "previous_turn" in r and "ttft_s" in r:
            res[r["id"]] = (r["ready_s"] + r["ttft_s"] - r["admitted_s"], r["reused_tokens"], r["prompt_tokens"],
                            r.get("output_text"))
    return res, [r.get("output_text") for r in f["request_list"]]

def area_reuse():
    trace = "--trace data/sessions_trace.jsonl " if quick else ""
    on_cmd = f"{B} run {trace}--report {out}/reuse_on"
    off_cmd = f"{B} run {trace}--no-prefix-reuse --report {out}/reuse_off"
    t, l = now(), load()
    run("reuse", on_cmd)
    run("reuse", off_cmd)
    on, on_out = follow_ups(f"{out}/reuse_on/report.json")
    off, off_out = follow_ups(f"{out}/reuse_off/report.json")
    same = "outputs equal on/off" if on_out == off_out else "OUTPUTS DIFFER on/off"
    for rid in sorted(on):
        a, b = on[rid][0], off[rid][0]
        row("prefix reuse", f"follow-up {rid}: TTFT from admission, {on[rid][1]} of {on[rid][2]} prompt tokens reused",
            f"{a:.3f} s on / {b:.3f} s off ({same})", ratio=f"fall {100 * (1 - a / b):.1f}%",
            cmd=f"{on_cmd}; {off_cmd}", when=t, l=l)

def area_tier():
    if subprocess.run(["sh", "-c", "command -v redis-server"], capture_output=True).returncode != 0:
        print("bench.sh: tier: no redis-server here; row skipped", flush=True)
        return
    cmd = f"python3 src/tier/tier_bench.py {B} {'1024' if quick else '1024,4096,7900'}"
    t, l = now(), load()
    text = run("tier", cmd)
    for m in re.finditer(r"^\| (\d+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+)x \| (\w+) \|", text, re.M):
        row("KV tier (Redis)", f"follow-up of {m.group(1)} tokens on a second server, {m.group(2)} restored",
            f"TTFT {m.group(3)} s restored / {m.group(4)} s prefilled (same first token: {m.group(6)})",
            ratio=f"{m.group(5)}×", cmd=cmd, when=t, l=l)

def area_sparse_quality():
    shape = "--context 1024 --stride 128 --max-windows 1" if quick else \
            "--context 8192 --stride 512 --max-windows 1 --device-pool 1280MiB"
    cmd = (f"{B} eval --text data/eval_text.txt {shape} --json --sparse-fraction 0.125 --sparse-score bound "
           f"--sparse-score mixed --sparse-layer-budget --sparse-layer-signal moments")
    t, l = now(), load()
    j = json.loads(run("sparse-quality", cmd))
    ctx = "1K" if quick else "8K"
    for s in j["settings"]:
        if s["name"] == "exact":
            continue
        row("sparse attention quality", f"{s['name']} at {ctx}: perplexity vs exact, top-1, attention-mass recall",
            f"{100 * (s['perplexity_ratio'] - 1):+.2f}%, {100 * s['top1_agreement']:.1f}%, {s['mass_recall']:.3f}",
            cmd=cmd, when=t, l=l)

def area_sparse_speed():
    cmd = f"{build}/src/runtime/activekv_runtime_bench --sparse --steps 32"
    t, l = now(), load()
    text = run("sparse-speed", cmd)
    m = re.search(r"sparse 1/8 against exact: step ([\d.]+)x faster \(wall medians\), ([\d.]+)x", text)
    row("sparse attention speed", "runtime step at 8K, 1/8 of the pages per KV-head group, vs exact",
        f"{m.group(1)}× wall, {m.group(2)}× CPU", cmd=cmd, when=t, l=l)
    if quick:
        return
    for extra, rounds, what in (("", 5, "bound (default)"),
                                ("--sparse-score mixed --sparse-layer-budget moments ", 3, "mixed, layer budgets by moments")):
        cmd = f"{build}/src/engine/engine_bench --context 8000 --decode 16 --rounds {rounds} --sparse-fraction 0.125 {extra}".strip()
        t, l = now(), load()
        text = run("sparse-speed", cmd)
        m = re.search(r"median over \d+ rounds of sparse / exact decode speed: ([\d.]+) \(wall\), ([\d.]+) \(CPU", text)
        row("sparse attention speed", f"whole model, decode at 8K, 1/8 of the pages, {what}, vs exact",
            f"{float(m.group(1)):.2f}× wall, {float(m.group(2)):.2f}× CPU", cmd=cmd, when=t, l=l)

def area_planner():
    cmd = (f"{build}/src/core/activekv_core_bench --benchmark_filter='^decode_256x16_32k' "
           f"--benchmark_format=json")
    t, l = now(), load()
    j = json.loads(run("planner", cmd))
    b = next(x for x in j["benchmarks"] if x.get("aggregate_name") == "median")
    row("residency planner", "one decode step, 256 contexts × 16 layers at 32K (CPU)",
        f"{b['cpu_time']:.1f} µs; {b['allocs_per_step']:.0f} allocations", cmd=cmd, when=t, l=l)

def area_copies():
    runs = 1 if quick else 3
    shape = "--context 1024 --decode 32" if quick else "--context 2048 --decode 64"
    cmd = f"{build}/src/engine/engine_bench {shape} --chunk 128 --pool 1,0.25 --threads 2"
    t, l = now(), load()
    wall, cpu_ = [], []
    for _ in range(runs):
        m = re.search(r"decode speed at pool 25% / at pool 100%: ([\d.]+) \(wall\), ([\d.]+) \(CPU", run("copies", cmd))
        wall.append(float(m.group(1)))
        cpu_.append(float(m.group(2)))
    row("copies", f"decode with a 25% device pool / 100% ({'one run' if runs == 1 else f'median of {runs} runs'})",
        f"{med(wall):.3f} wall, {med(cpu_):.3f} CPU", cmd=cmd + (f"   # {runs} runs" if runs > 1 else ""), when=t, l=l)
    cmd = (f"{build}/src/backends/host/activekv_backend_bench --benchmark_filter='^(copy|plain_memcpy)/4194304"
           f"|attention_smollm2_30_layers/8192/2/30|memcpy_kv_30_layers' --benchmark_min_time=0.2 --benchmark_format=json")
    t, l = now(), load()
    j = {b["name"]: b for b in json.loads(run("copies", cmd))["benchmarks"]}
    bps = lambda n: next(v["bytes_per_second"] for k, v in j.items() if k.startswith(n))
    row("copies", "host backend: one 4 MiB h2d copy / memcpy of the same bytes (bytes per CPU-second)",
        f"{bps('copy/4194304') / 1e9:.1f} / {bps('plain_memcpy/4194304') / 1e9:.1f} GB/s",
        ratio=f"{bps('copy/4194304') / bps('plain_memcpy/4194304'):.2f}", cmd=cmd, when=t, l=l)
    row("copies", "decode attention over 30 layers of 8K (180 MiB), 2 threads / memcpy of the same bytes (wall)",
        f"{bps('attention_smollm2_30_layers') / 1e9:.2f} / {bps('memcpy_kv_30_layers') / 1e9:.2f} GB/s",
        ratio=f"{bps('attention_smollm2_30_layers') / bps('memcpy_kv_30_layers'):.2f}", cmd=cmd, when=t, l=l)

areas = [("peer", area_peer), ("run", area_run), ("serve", area_serve), ("reuse", area_reuse), ("tier", area_tier),
         ("sparse-quality", area_sparse_quality), ("sparse-speed", area_sparse_speed), ("planner", area_planner),
         ("copies", area_copies)]
wanted = [a for a in only.split(",") if a] or [a for a, _ in areas]
unknown = set(wanted) - {a for a, _ in areas}
if unknown:
    sys.exit(f"bench.sh: --only {','.join(sorted(unknown))}: give some of {', '.join(a for a, _ in areas)}")
if peer and "peer" in wanted:
    print(f"bench.sh: the peer: {peer} (built once on first use: about 4 minutes of 2 cores)", flush=True)
    subprocess.run([peer, "--help"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
start_load, started = load(), now()
for name, fn in areas:
    if name in wanted:
        try:
            fn()
        except Exception as e:  # a failed area is a row that says so; the others still run
            failed.append(name)
            row(name, "FAILED", str(e), l=load(), when=now())

loads = [r["load"] for r in rows]
loaded = max(loads, default=0) > cores
head = (f"ActiveKV {commit}, {'--quick' if quick else 'full'} run {started}–{now()} UTC, on {cores} cores ({cpu}), "
        f"load average {min(loads, default=0):.1f}–{max(loads, default=0):.1f} before the rows"
        + (f": a LOADED machine (load above its {cores} cores), so absolute figures are the scheduler's; "
           "read the ratios within a row" if loaded else "") + ". Peer: "
        + (f"llama.cpp's llama-bench ({peer})" if peer else "none (no ../shared/peer/llama-bench.sh; PEER_SCRIPT=PATH)") + ".")
md = [head, "", "| area | measure | ActiveKV | llama.cpp | ratio | command | when (UTC) | machine |",
      "|---|---|---|---|---|---|---|---|"]
for r in rows:
    cell = r["command"].replace("|", "\\|")  # a pipe inside a command would split the Markdown cell
    md.append(f"| {r['area']} | {r['measure']} | {r['activekv']} | {r['peer']} | {r['ratio']} | `{cell}` | "
              f"{r['when_utc']} | {r['machine']} |")
open(os.path.join(out, "bench.md"), "w").write("\n".join(md) + "\n")
json.dump({"commit": commit, "quick": quick, "started_utc": started, "cores": cores, "cpu": cpu, "loaded": loaded,
           "peer": peer or None, "rows": rows}, open(os.path.join(out, "bench.json"), "w"), indent=2)
print()
print("\n".join(md))
print(f"\nwritten: {out}/bench.md, {out}/bench.json (logs: {out}/logs/)")
sys.exit(1 if failed else 0)
EOF
