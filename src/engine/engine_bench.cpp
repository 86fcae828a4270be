// engine_bench.cpp — prefill and decode speed of the reference engine on the
// default model, its KV in the ActiveKV runtime (host backend), and where a
// step's time goes. A small program rather than Google Benchmark: one run is
// seconds long and the figures wanted are rates and shares, not ns/iteration.
//
//   engine_bench [--context N] [--decode M] [--pool FRACTION[,FRACTION...]] [--threads T] [--chunk C] [--kv runtime|reference]
//                [--activations q16|q8]
//                [--sparse-fraction F] [--sparse-lists group|one] [--sparse-score bound|moments|mixed]
//                [--sparse-layer-budget captured|moments] [--rounds R] [--staging auto|copy|in-place]
//                [--suffix H,S] [--sequences S]
//
// --sequences S: S contexts, each prefilled with its own N-token prompt (one after the other), then M
// decode steps that each carry one token of every context: batched decode, as a server decoding S
// requests at once runs it. Tokens/s then counts the S tokens of every step. Not with --sparse-fraction
// or --suffix.
//
// --staging: how history below the device pool reaches the kernel (docs/IN_PLACE.md): auto (the
// engine's choice: read in place where the backend's kernel reads the host pool), copy (staged
// through the tiles) or in-place.
//
// --sparse-fraction F (docs/SPARSE.md): after the prefill, M decode steps in exact mode and then
// M in sparse mode reading F of the pages, on the same runtime and context, and their ratio.
// --sparse-lists: a page list per KV-head group (group, the default) or one list per layer (one).
// --rounds R: R rounds of (M exact, M sparse) after the one prefill, each round's ratio printed,
// then the medians of the rounds' ratios (same-run ratios at a fraction of a prefill each).
// --sparse-score: how the pages are ranked; --sparse-layer-budget SIGNAL: the budget spread over the
// layers by the missed mass as SIGNAL gives it (captured: the kernel's extrapolation; moments).
//
// --suffix H,S (runtime KV only; --context is then H + S): the follow-up's first step. Each of
// --rounds R rounds opens a fresh context and prefills the whole H + S prompt in --chunk chunks
// (timed), then opens another, prefills H tokens (untimed) and times one S-token step on top of
// that history, as a reusing follow-up's suffix step is. Prints each round's two rates with
// their per-phase milliseconds per token, then medians and the median same-round ratio.
//
// Prints: prefill tokens/s over the N-token prompt, decode tokens/s over M
// steps after it, the decode step's time shares (matmul, attention, copies,
// planning, other), bytes staged, and the weights' memory-traffic floor:
// weight bytes read per token ÷ measured memcpy bandwidth.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/state_plan.hpp"
#include "engine/engine.hpp"
#include "engine/model_path.hpp"
#include "engine/reference_kv_access.hpp"
#include "engine/runtime_kv.hpp"
#include "engine/sampler.hpp"

using namespace activekv;
using namespace activekv::engine;

namespace {

// CPU seconds of the whole process (all threads): a figure a busy machine distorts less than wall time.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best of 5 copies of a 256 MiB buffer: GB/s of read + write traffic counted as bytes read.
double memcpy_read_gbps() {
  const std::size_t bytes = 256ull << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0.0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = seconds_since(t0);
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    a[static_cast<std::size_t>(i)] = b[static_cast<std::size_t>(i) + 1];
  }
  return best;
}

void print_shares(const char* what, const PhaseTimes& t) {
  const double total = static_cast<double>(t.total_ns());
  fmt::print("{} time shares: matmul {:.1f}%  attention {:.1f}%  copies {:.1f}%  planning {:.1f}%  other {:.1f}%"
             "  recurrent {:.1f}%\n", what,
             100.0 * static_cast<double>(t.matmul_ns) / total, 100.0 * static_cast<double>(t.attention_ns) / total,
             100.0 * static_cast<double>(t.copies_ns) / total, 100.0 * static_cast<double>(t.planning_ns) / total,
             100.0 * static_cast<double>(t.other_ns) / total, 100.0 * static_cast<double>(t.recurrent_ns) / total);
}

}  // namespace

struct Figures {
  double decode_tokens_per_s = 0;
  double decode_tokens_per_cpu_s = 0;
};

bool sparse_one_list = false;  // --sparse-lists one
std::uint32_t suffix_history = 0, suffix_tokens = 0;  // --suffix H,S
std::uint32_t sparse_rounds = 1;  // --rounds
std::uint32_t bench_sequences = 1;  // --sequences

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
SparseScore sparse_score = SparseScore::bound;  // --sparse-score
bool sparse_layer_budget = false;               // --sparse-layer-budget SIGNAL
LayerSignal sparse_layer_signal = LayerSignal::captured;

// Per-phase milliseconds per token of the steps in `t` (over `tokens` tokens).
std::string phases_per_token(const PhaseTimes& t, double tokens) {
  const auto ms = [&](std::uint64_t ns) { return static_cast<double>(ns) / 1e6 / tokens; };
  return fmt::format("matmul {:.3f} (logits {:.3f}) attention {:.3f} copies {:.3f} planning {:.3f} other {:.3f} recurrent {:.3f}",
                     ms(t.matmul_ns), ms(t.logits_ns), ms(t.attention_ns), ms(t.copies_ns), ms(t.planning_ns),
                     ms(t.other_ns), ms(t.recurrent_ns));
}

// --suffix H,S: see the file's opening.
int run_suffix(Engine& eng, KvRuntime& runtime, ContextId ctx, const std::vector<TokenId>& prompt, std::uint32_t chunk,
               std::uint32_t final_length) {
  const std::uint32_t h = suffix_history, n = static_cast<std::uint32_t>(prompt.size());
  const auto feed = [&](ContextId c, std::uint32_t from, std::uint32_t to, std::uint32_t step_max) -> bool {
    for (std::uint32_t fed = from; fed < to; fed += step_max) {
      const std::uint32_t k = std::min(step_max, to - fed);
      const StepInput in{c, std::span<const TokenId>(prompt).subspan(fed, k), fed + k == to};
      if (Status s = eng.step({&in, 1}); !s) return fmt::print(stderr, "{}\n", s.error().describe()), false;
    }
    return true;
  };
  const auto reopen = [&](std::uint64_t id) -> bool {
    runtime.finish(ctx);
    Result<AdmitResult> a = runtime.open_context(id, final_length);
    if (!a || a->outcome != AdmitOutcome::admitted) return fmt::print(stderr, "not admitted\n"), false;
    ctx = a->handle;
    return true;
  };
  std::vector<double> full_rates, suffix_rates, ratios, suffix_ms, cpu_ratios;
  PhaseTimes full_sum, suffix_sum;
  std::uint64_t id = 100;
  for (std::uint32_t round = 0; round <= sparse_rounds; ++round) {  // round 0 warms up, untimed
    if (round > 0 && !reopen(++id)) return 1;
    eng.reset_times();
    double c0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    if (!feed(ctx, 0, n, chunk)) return 1;
    const double full_s = seconds_since(t0);
    const double full_cpu = cpu_seconds() - c0;
    const PhaseTimes full = eng.times();
    if (!reopen(++id) || !feed(ctx, 0, h, chunk)) return 1;
    eng.reset_times();
    c0 = cpu_seconds();
    t0 = std::chrono::steady_clock::now();
    if (!feed(ctx, h, n, n - h)) return 1;
    const double suffix_s = seconds_since(t0);
    const double suffix_cpu = cpu_seconds() - c0;
    const PhaseTimes suffix = eng.times();
    if (round == 0) continue;
    const double full_rate = n / full_s, suffix_rate = (n - h) / suffix_s;
    full_rates.push_back(full_rate);
    suffix_rates.push_back(suffix_rate);
    ratios.push_back(suffix_rate / full_rate);
    suffix_ms.push_back(1e3 * suffix_s);
    full_sum += full;
    suffix_sum += suffix;
    cpu_ratios.push_back((n - h) / suffix_cpu / (n / full_cpu));
    fmt::print("round {}: prefill {} in chunks of {}: {:.3f} s, {:.1f} tok/s | {} after {}: {:.3f} s, {:.1f} tok/s | ratio {:.3f}"
               " (CPU: {:.2f} / {:.3f} s, ratio {:.3f})\n",
               round, n, chunk, full_s, full_rate, n - h, h, suffix_s, suffix_rate, suffix_rate / full_rate, full_cpu,
               suffix_cpu, cpu_ratios.back());
    fmt::print("  ms/token  prefill: {}\n  ms/token  suffix:  {}\n", phases_per_token(full, n),
               phases_per_token(suffix, n - h));
  }
  const double rounds = sparse_rounds;
  fmt::print("median over {} rounds: prefill {:.1f} tok/s, suffix step {:.1f} tok/s ({:.1f} ms), suffix / prefill {:.3f}"
             " (per CPU second: {:.3f})\n",
             sparse_rounds, median_of(full_rates), median_of(suffix_rates), median_of(suffix_ms), median_of(ratios),
             median_of(cpu_ratios));
  fmt::print("mean ms/token  prefill: {}\nmean ms/token  suffix:  {}\n", phases_per_token(full_sum, rounds * n),
             phases_per_token(suffix_sum, rounds * (n - h)));
  return 0;
}

Activations bench_activations = Activations::q16;  // --activations

int run(std::uint32_t context, std::uint32_t decode, std::uint32_t threads, std::uint32_t chunk, double pool,
        const std::string& kv_kind, Figures& figures, double sparse_fraction = 0.0, const std::string& staging = "auto") {
  Result<std::string> path = find_default_model();
  if (!path) {
    fmt::print(stderr, "{}\n", path.error().describe());
    return 1;
  }
  Result<std::unique_ptr<Model>> loaded = Model::load(*path);
  if (!loaded) {
    fmt::print(stderr, "{}\n", loaded.error().describe());
    return 1;
  }
  std::unique_ptr<Model> model = std::move(loaded).value();
  const ModelConfig cfg = model->config();
  const std::uint64_t weight_bytes = model->weight_bytes_per_token();
  const std::uint32_t seqs = bench_sequences;
  const ForwardLimits limits{std::max(chunk, seqs), seqs};
  const std::uint32_t page_tokens = 16;
  const std::uint32_t decode_total = sparse_fraction > 0.0 ? 2 * decode * sparse_rounds : decode;
  const std::uint32_t final_length = (context + decode_total + 1 + page_tokens - 1) / page_tokens * page_tokens;
  if (cfg.context_tokens != 0 && context + decode_total + 1 > cfg.context_tokens) {
    fmt::print(stderr, "--context {} with {} decode steps would hold {} tokens, past the model's context length {}: "
               "lower --context, --decode or --rounds\n", context, decode_total, context + decode_total + 1, cfg.context_tokens);
    return 2;
  }

  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvRuntime> runtime;
  std::unique_ptr<KvAccess> kv;
  std::vector<ContextId> ctxs(seqs);
  if (kv_kind == "runtime") {
    MemorySettings memory;
    memory.page_tokens = page_tokens;
    memory.tile_tokens = 1024;
    memory.tiles = 2;
    memory.max_context_tokens = final_length;
    memory.max_seqs = seqs;
    memory.chunk_tokens = chunk;  // a prefill step appends up to --chunk tokens
    KvRuntimeSettings settings = runtime_settings(*model, memory, limits);
    if (sparse_fraction > 0.0) {
      settings.sparse.mode = SparseMode::fraction;
      settings.sparse.fraction = static_cast<float>(sparse_fraction);
      settings.sparse.per_group = !sparse_one_list;
      settings.sparse.score = sparse_score;
      settings.sparse.layer_budget = sparse_layer_budget;
      settings.sparse.layer_signal = sparse_layer_signal;
    }
    const std::uint64_t row = settings.memory.geometry.row_bytes();
    const std::uint32_t dense = settings.memory.geometry.dense_layers;  // a hybrid's attention layers
    const std::uint64_t pages = static_cast<std::uint64_t>(
        std::ceil(pool * dense * (final_length / page_tokens)));
    // One history per sequence, and a hybrid's state checkpoints (state_plan.hpp) and recurrent slots.
    settings.memory.host_pool_bytes =
        seqs * (std::uint64_t{dense} * final_length * row + state_bytes_per_history(settings.memory));
    settings.memory.device_pool_bytes = 5 * arena_alignment_bytes + 2ull * 1024 * row + seqs * pages * page_tokens * row +
                                        seqs * settings.memory.geometry.recurrent_state_bytes;
    BackendOptions options;
    options.compute_threads = threads;
    Result<std::unique_ptr<Backend>> b = make_backend("host", options);
    if (!b) return fmt::print(stderr, "{}\n", b.error().describe()), 1;
    backend = std::move(b).value();
    choose_history_reads(settings, *backend);
    if (staging != "auto") settings.read_in_place = staging == "in-place";
    Result<std::unique_ptr<KvRuntime>> r = KvRuntime::create(settings, *backend);
    if (!r) {
      fmt::print(stderr, "--pool {} at --context {} sizes a device pool of {} pages, too small for this runtime: {}; raise --pool or --context\n",
                 pool, context, pages, r.error().describe());
      return 2;
    }
    runtime = std::move(r).value();
    for (std::uint32_t q = 0; q < seqs; ++q) {
      Result<AdmitResult> a = runtime->open_context(q + 1, final_length);
      if (!a || a->outcome != AdmitOutcome::admitted) return fmt::print(stderr, "not admitted\n"), 1;
      ctxs[q] = a->handle;
    }
    kv = std::make_unique<RuntimeKv>(*runtime);
  } else {
    auto r = std::make_unique<ReferenceKvAccess>(model->geometry(), cfg.q_heads, page_tokens);
    for (ContextId& c : ctxs) c = r->open(final_length);
    kv = std::move(r);
  }
  EngineSettings es;
  es.threads = threads;
  es.activations = bench_activations;
  es.limits = limits;
  Result<std::unique_ptr<Engine>> created = Engine::create(std::move(model), std::move(kv), es);
  if (!created) return fmt::print(stderr, "{}\n", created.error().describe()), 1;
  Engine& eng = **created;

  const ContextId ctx = ctxs[0];
  std::vector<TokenId> prompt(context);
  std::uint64_t x = 12345;
  const auto make_prompt = [&] {
    for (TokenId& t : prompt) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      t = static_cast<TokenId>(200 + (x >> 33) % 20000);
    }
  };
  make_prompt();
  if (suffix_tokens > 0) {
    if (!runtime) return fmt::print(stderr, "--suffix needs --kv runtime\n"), 2;
    return run_suffix(eng, *runtime, ctx, prompt, chunk, final_length);
  }
  double cpu0 = cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<TokenId> next(seqs);  // each sequence's next token: the argmax of its last logits
  for (std::uint32_t q = 0; q < seqs; ++q) {
    if (q > 0) make_prompt();  // the first prompt is the one a single sequence gets
    for (std::size_t fed = 0; fed < prompt.size(); fed += chunk) {
      const std::size_t n = std::min<std::size_t>(chunk, prompt.size() - fed);
      const StepInput in{ctxs[q], std::span<const TokenId>(prompt).subspan(fed, n), fed + n == prompt.size()};
      if (Status s = eng.step({&in, 1}); !s) return fmt::print(stderr, "{}\n", s.error().describe()), 1;
    }
    next[q] = Sampler::argmax(eng.logits(0));
  }
  const double prefill_s = seconds_since(t0);
  const double prefill_cpu = cpu_seconds() - cpu0;
  const PhaseTimes prefill_times = eng.times();
  eng.reset_times();
  const std::uint64_t staged_before = runtime ? runtime->counters().bytes_staged : 0;
  if (sparse_fraction > 0.0 && runtime) {
    // The same context, exact then sparse: M steps each, the ratio of their wall times.
    SparseSettings sparse;
    sparse.mode = SparseMode::fraction;
    sparse.fraction = static_cast<float>(sparse_fraction);
    sparse.per_group = !sparse_one_list;
    std::vector<double> wall_ratios, cpu_ratios;
    sparse.score = sparse_score;
    sparse.layer_budget = sparse_layer_budget;
    sparse.layer_signal = sparse_layer_signal;
    for (std::uint32_t round = 0; round < sparse_rounds; ++round) {
      double seconds[2] = {0, 0}, cpu[2] = {0, 0};
      for (int phase = 0; phase < 2; ++phase) {
        if (Status s = runtime->set_sparse(phase == 0 ? SparseSettings{} : sparse); !s) return fmt::print(stderr, "{}\n", s.error().describe()), 1;
        runtime->reset_sparse_stats();
        eng.reset_times();
        const double c0 = cpu_seconds();
        const auto w0 = std::chrono::steady_clock::now();
        for (std::uint32_t i = 0; i < decode; ++i) {
          const TokenId t = Sampler::argmax(eng.logits(0));
          const StepInput in{ctx, {&t, 1}, true};
          if (Status s = eng.step({&in, 1}); !s) return fmt::print(stderr, "{}\n", s.error().describe()), 1;
        }
        seconds[phase] = seconds_since(w0);
        cpu[phase] = cpu_seconds() - c0;
        const SparseStats& ss = runtime->sparse_stats();
        fmt::print("decode {} tokens, {}: {:.2f} s, {:.2f} ms/token; {:.2f} CPU s; pages read per layer {:.1f} of {:.1f}\n",
                   decode, phase == 0 ? "exact" : fmt::format("sparse {:.4g} of the pages ({}, score {}{})", sparse_fraction, sparse_one_list ? "one list" : "a list per group", sparse_score_name(sparse_score), sparse_layer_budget ? fmt::format(", layer budgets by {}", layer_signal_name(sparse_layer_signal)) : std::string()), seconds[phase],
                   1e3 * seconds[phase] / decode, cpu[phase], ss.pages_read_per_selection(),
                   ss.selections == 0 ? 0.0 : static_cast<double>(ss.pages_context) / static_cast<double>(ss.selections));
        if (ss.decode_steps != 0) {
          fmt::print("selection {:.0f} us/token (wall), {:.0f} us/token (its thread's CPU)\n",
                     static_cast<double>(ss.select_ns) / 1e3 / static_cast<double>(ss.decode_steps),
                     static_cast<double>(ss.select_cpu_ns) / 1e3 / static_cast<double>(ss.decode_steps));
        }
        print_shares(phase == 0 ? "decode (exact)" : "decode (sparse)", eng.times());
      }
      fmt::print("sparse decode speed / exact decode speed at context {}: {:.3f} (wall), {:.3f} (CPU time)\n", context,
                 seconds[0] / seconds[1], cpu[0] / cpu[1]);
      wall_ratios.push_back(seconds[0] / seconds[1]);
      cpu_ratios.push_back(cpu[0] / cpu[1]);
    }
    if (sparse_rounds > 1) {
      fmt::print("median over {} rounds of sparse / exact decode speed: {:.3f} (wall), {:.3f} (CPU time); wall", sparse_rounds,
                 median_of(wall_ratios), median_of(cpu_ratios));
      for (const double r : wall_ratios) fmt::print(" {:.3f}", r);
      fmt::print("\n");
    }
    created->reset();
    return 0;
  }
  std::vector<StepInput> ins(seqs);
  cpu0 = cpu_seconds();
  t0 = std::chrono::steady_clock::now();
  for (std::uint32_t i = 0; i < decode; ++i) {
    for (std::uint32_t q = 0; q < seqs; ++q) {
      if (i > 0) next[q] = Sampler::argmax(eng.logits(q));
      ins[q] = StepInput{ctxs[q], {&next[q], 1}, true};
    }
    if (Status s = eng.step(ins); !s) return fmt::print(stderr, "{}\n", s.error().describe()), 1;
  }
  const double decode_s = seconds_since(t0);
  const double decode_cpu = cpu_seconds() - cpu0;
  const double gbps = memcpy_read_gbps();
  fmt::print("model {}, {} kernels, {} activations, {} threads, kv {}, pool {:.0f}% of the context\n", cfg.name, isa_name(eng.isa()),
             activations_name(eng.activations()), threads, kv_kind, pool * 100);
  const double fed = static_cast<double>(context) * seqs;
  fmt::print("prefill {} tokens (chunks of {}): {:.2f} s, {:.1f} tokens/s; {:.2f} CPU s ({:.1f} tokens per CPU second)\n",
             context * seqs, chunk, prefill_s, fed / prefill_s, prefill_cpu, fed / prefill_cpu);
  if (seqs == 1)
    fmt::print("decode {} tokens at context {}..{}: {:.2f} s, {:.1f} tokens/s ({:.2f} ms/token); {:.2f} CPU s\n", decode,
               context, context + decode, decode_s, decode / decode_s, 1e3 * decode_s / decode, decode_cpu);
  else
    fmt::print("decode {} steps of {} sequences at context {}..{}: {:.2f} s, {:.1f} tokens/s ({:.2f} ms/step); "
               "{:.2f} CPU s ({:.1f} tokens per CPU second)\n", decode, seqs, context, context + decode, decode_s,
               decode * seqs / decode_s, 1e3 * decode_s / decode, decode_cpu, decode * seqs / decode_cpu);
  print_shares("prefill", prefill_times);
  print_shares("decode", eng.times());
  fmt::print("decode ms/{}: {}\n", seqs == 1 ? "token" : "step", phases_per_token(eng.times(), decode));
  if (runtime)
    fmt::print("bytes staged during decode: {}; history below the pool {}\n", runtime->counters().bytes_staged - staged_before,
               runtime->explain(ctx).staged_in_place ? "read in place in the host pool" : "staged through the tiles");
  const double floor_ms = static_cast<double>(weight_bytes) / (gbps * 1e9) * 1e3;
  fmt::print("weights read per token {:.1f} MiB; memcpy {:.1f} GB/s; traffic floor {:.2f} ms/token ({:.0f} tokens/s); "
             "decode at {:.0f}% of the floor's speed\n",
             static_cast<double>(weight_bytes) / 1048576.0, gbps, floor_ms, 1e3 / floor_ms, 100.0 * floor_ms / (1e3 * decode_s / decode));
  created->reset();
  figures.decode_tokens_per_s = decode * seqs / decode_s;
  figures.decode_tokens_per_cpu_s = decode * seqs / decode_cpu;
  return 0;
}

// "H,S": two whole numbers and nothing else, H ≥ 1 and S ≥ 1, H + S at most max_context.
bool parse_suffix(const std::string& text, std::uint32_t max_context) {
  const std::size_t comma = text.find(',');
  if (comma == std::string::npos) return false;
  std::uint32_t h = 0, n = 0;
  const char* const end = text.data() + text.size();
  const auto [hp, he] = std::from_chars(text.data(), text.data() + comma, h);
  const auto [sp, se] = std::from_chars(text.data() + comma + 1, end, n);
  if (he != std::errc{} || hp != text.data() + comma || se != std::errc{} || sp != end) return false;
  if (h == 0 || n == 0 || h > max_context || n > max_context - h) return false;
  suffix_history = h;
  suffix_tokens = n;
  return true;
}

int main(int argc, char** argv) {
  std::uint32_t context = 512, decode = 32, threads = 2, chunk = 128;
  double sparse_fraction = 0.0;
  std::vector<double> fractions{1.0};
  std::string kv_kind = "runtime";
  std::string staging = "auto";
  std::string lists = "group", score, layer_budget, suffix;
  constexpr std::uint32_t max_context = 1u << 20;  // the model's own limit is checked when the context opens
  CLI::App app{"engine_bench: prefill and decode speed of the reference engine (see the source's opening)"};
  app.add_option("--context", context, "prompt tokens")->check(CLI::Range(2u, max_context));
  app.add_option("--decode", decode, "decode steps")->check(CLI::Range(1u, 1u << 16));
  app.add_option("--pool", fractions, "device pool as fractions of the context's pages, comma-separated")
      ->delimiter(',')->check(CLI::Range(1e-6, 1.0));
  app.add_option("--threads", threads, "compute threads")->check(CLI::Range(1u, 64u));
  std::string activations_text = "q16";
  app.add_option("--activations", activations_text, "activation width of the quantised products (matmul_q8.hpp)")
      ->check(CLI::IsMember({"q16", "q8"}));
  app.add_option("--chunk", chunk, "prefill chunk tokens")->check(CLI::Range(1u, 1u << 16));
  app.add_option("--kv", kv_kind, "where the KV lives")->check(CLI::IsMember({"runtime", "reference"}));
  app.add_option("--sparse-fraction", sparse_fraction, "fraction of the pages sparse decode reads")
      ->check(CLI::Range(1e-6, 1.0));
  app.add_option("--sparse-lists", lists, "a page list per KV-head group or one per layer")
      ->check(CLI::IsMember({"group", "one"}));
  app.add_option("--rounds", sparse_rounds, "rounds of exact and sparse decode")->check(CLI::Range(1u, 64u));
  app.add_option("--sparse-score", score, "how pages are ranked: bound, moments or mixed");
  app.add_option("--sparse-layer-budget", layer_budget, "spread the budget over layers by captured or moments");
  app.add_option("--staging", staging, "how history below the pool reaches the kernel")
      ->check(CLI::IsMember({"auto", "copy", "in-place"}));
  app.add_option("--suffix", suffix, "H,S: one S-token step on an H-token history");
  app.add_option("--sequences", bench_sequences, "contexts decoded together, one token each per step")
      ->check(CLI::Range(1u, 64u));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  chunk = std::min(chunk, context);  // a chunk longer than the prompt is the prompt
  (void)parse_activations(activations_text, &bench_activations);  // CLI11 checked it
  sparse_one_list = lists == "one";
  if (!score.empty() && (!sparse_score_from_name(score.c_str(), sparse_score) || sparse_score == SparseScore::oracle)) {
    fmt::print(stderr, "--sparse-score {}: give bound, moments or mixed\n", score);
    return 2;
  }
  if (!layer_budget.empty()) {
    if (!layer_signal_from_name(layer_budget.c_str(), sparse_layer_signal)) {
      fmt::print(stderr, "--sparse-layer-budget {}: give the signal that spreads it, captured or moments\n", layer_budget);
      return 2;
    }
    sparse_layer_budget = true;
  }
  if (bench_sequences > 1 && (sparse_fraction > 0.0 || !suffix.empty())) {
    fmt::print(stderr, "--sequences {} runs batched exact decode only: drop --sparse-fraction and --suffix, or use "
               "--sequences 1\n", bench_sequences);
    return 2;
  }
  if (!suffix.empty()) {
    if (!parse_suffix(suffix, max_context)) {
      fmt::print(stderr, "--suffix {}: give H,S, two whole numbers (history tokens ≥ 1, suffix tokens ≥ 1)\n", suffix);
      return 2;
    }
    context = suffix_history + suffix_tokens;
  }
  std::vector<Figures> figures(fractions.size());
  for (std::size_t i = 0; i < fractions.size(); ++i)
    if (int rc = run(context, decode, threads, chunk, fractions[i], kv_kind, figures[i], sparse_fraction, staging); rc != 0) return rc;
  for (std::size_t i = 1; i < fractions.size(); ++i)
    fmt::print("decode speed at pool {:.0f}% / at pool {:.0f}%: {:.3f} (wall), {:.3f} (CPU time)\n", fractions[i] * 100,
               fractions[0] * 100, figures[i].decode_tokens_per_s / figures[0].decode_tokens_per_s,
               figures[i].decode_tokens_per_cpu_s / figures[0].decode_tokens_per_cpu_s);
  return 0;
}
