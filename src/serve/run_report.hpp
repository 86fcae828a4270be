// run_report.hpp — every figure of a run, as JSON for machines and HTML for people.
//
// report.json holds the figures the issue lists (requests, tokens in and out,
// throughput, TTFT and inter-token latency p50/p99, bytes and copy counts
// h2d/d2h/d2d, resident vs staged share, promotions, reclaimed pages and steps,
// quarantines, allocations_after_warmup {device, heap}, peak host and device
// bytes against the plan) plus one record per request. report.html is one
// self-contained page (no script, no external file) with inline SVG charts:
// device pages per context against floor/target/burst, per-token latency,
// bytes staged/promoted/written back per step, and the queue.
//
// The figures are computed once (summarize) from the scheduler's records and
// the engine's counters; JSON, HTML and the terminal summary all print that
// one object, so they cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "activekv/result.hpp"
#include "serve/run_config.hpp"
#include "serve/scheduler.hpp"
#include "serve/step_engine.hpp"

namespace activekv::serve {

struct ReportInputs {
  std::string model;                      // path or name
  std::string trace;                      // path, or "default"
  std::string config_source;              // path, or "default"
  RunConfig config{};
  const Scheduler* scheduler = nullptr;
  EnginePlan plan{};
  EngineCounters totals{};                // engine counters at the end of the run
  std::uint64_t heap_allocations_after_warmup = 0;  // counted around every scheduler step
  bool heap_counter_linked = false;       // false: the heap figure could not be measured
  double wall_s = 0;                      // first arrival to last request's end
  std::vector<std::string> outputs;       // decoded output text per request (may be empty)
};

// Nearest-rank percentile (q in [0, 1]) of values; 0 for none. Sorts a copy.
double percentile(std::vector<double> values, double q);

// Every figure, as the JSON object written to report.json.
nlohmann::json summarize(const ReportInputs& in);

// The HTML page for a summary and its run.
std::string report_html(const ReportInputs& in, const nlohmann::json& figures);

// Writes DIR/report.json and DIR/report.html (creating DIR).
Status write_report(const std::string& dir, const ReportInputs& in, const nlohmann::json& figures);

// The end-of-run summary for the terminal: a few lines from the figures.
std::string summary_text(const nlohmann::json& figures);

}  // namespace activekv::serve
