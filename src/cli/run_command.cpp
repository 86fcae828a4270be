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
#include "cli/run_overrides.hpp"
#include "serve/clock.hpp"
#include "serve/fake_engine.hpp"
#include "serve/run_config.hpp"
#include "serve/run_job.hpp"
#include "serve/run_report.hpp"
#include "serve/trace.hpp"

#ifdef ACTIVEKV_SERVE_HAS_ENGINE
#include "serve/engine_step_engine.hpp"
#endif

namespace activekv::cli {

namespace {

struct RunOptions : RunOverrides {
  std::string trace;
  std::string report;
  std::uint32_t max_requests = 0;
  double arrival_scale = 1.0;
  CLI::Option* max_requests_given = nullptr;
  CLI::Option* arrival_scale_given = nullptr;
};

int fail(const Error& error, int code) {
  std::fprintf(stderr, "activekv run: %s\n", error.describe().c_str());
  return code;
}

// The configuration: the file (or the default), the shared overrides, then run's own.
Result<serve::RunConfig> load_config(const RunOptions& o) {
  return load_run_config(o, [&](serve::RunConfig& c) -> Status {
    if (Status s = count_flag(o.max_requests_given, "--max-requests", o.max_requests, UINT32_MAX); !s) return s;
    if (given(o.arrival_scale_given) && (!std::isfinite(o.arrival_scale) || o.arrival_scale < 0.0 || o.arrival_scale > 1e6)) {
      return make_error(ErrorCode::invalid_argument, "--arrival-scale",
                        fmt::format("{} is out of range: give a finite number from 0 to 1e6 (0: all arrive at once)",
                                    o.arrival_scale));
    }
    if (given(o.arrival_scale_given)) c.arrival_scale = o.arrival_scale;
    return {};
  });
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
    auto fc = fake_engine_config(c);
    if (!fc) return fc.error();
    fc->clock = fake_clock;
    *model_name = "fake (deterministic test model)";
    return std::unique_ptr<serve::StepEngine>(std::make_unique<serve::FakeEngine>(*fc));
  }
  if (o.engine != "model") {
    return make_error(ErrorCode::invalid_argument, "--engine", fmt::format("unknown engine \"{}\" (model or fake)", o.engine));
  }
#ifdef ACTIVEKV_SERVE_HAS_ENGINE
  auto path = model_path(c);
  if (!path) return path.error();
  *model_name = *path;
  auto e = serve::EngineStepEngine::create(serve::EngineStepEngineSettings{c, *path, o.backend});
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
  if (Status s = check_pools_fit_machine(o, *config); !s) return fail(s.error(), 2);
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
  sub.add_option("--report", o->report, "Write DIR/report.json and DIR/report.html");
  o->add_to(sub);
  o->max_requests_given = sub.add_option("--max-requests", o->max_requests, "Run only the trace's first N requests");
  o->arrival_scale_given =
      sub.add_option("--arrival-scale", o->arrival_scale, "Multiply every arrival time (0: all arrive at once; up to 1e6)");
  return [o] { return run(*o); };
}

Registration reg{"run", "Run a workload with continuous batching and report on it (the main job)", 20, setup};

}  // namespace

}  // namespace activekv::cli
