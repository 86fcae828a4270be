// run_job.hpp — one run from start to summary: plan, admission line, steps with progress, figures.
//
// Engine-agnostic: `activekv run` passes the real engine, tests pass the fake
// one. The job prints the memory plan first, then the admission decision in
// words (and, when the host pool lowers the concurrency, says so with the
// numbers), then progress while the scheduler runs, and returns the figures.
// Heap allocations are counted around every scheduler step (the step path);
// printing progress is outside the count.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "activekv/result.hpp"
#include "serve/clock.hpp"
#include "serve/run_config.hpp"
#include "serve/run_report.hpp"
#include "serve/scheduler.hpp"
#include "serve/step_engine.hpp"
#include "serve/trace.hpp"

namespace activekv::serve {

struct RunJobOptions {
  std::FILE* out = stdout;         // plan, progress and summary
  bool terminal = false;           // progress rewrites one line (\r) instead of printing lines
  double progress_interval_s = 2;  // plain-line progress at most this often (and at every request end)
  bool decode_outputs = true;      // put each output's text in the report
};

struct RunJobResult {
  std::unique_ptr<Scheduler> scheduler;
  ReportInputs inputs;             // what the report is made from (scheduler pointer set)
  nlohmann::json figures;
};

// The admission line printed after the plan, e.g.
// "concurrency 4: the host pool holds 4 histories, below max_seqs 6; further requests queue".
std::string admission_text(const EnginePlan& plan, const RunConfig& config);

Result<RunJobResult> run_job(StepEngine& engine, Clock& clock, const std::vector<TraceRequest>& trace,
                             const RunConfig& config, ReportInputs inputs, const RunJobOptions& options);

}  // namespace activekv::serve
