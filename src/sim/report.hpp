// report.hpp — what `activekv sim` prints and writes: tables, JSON, and an HTML page with charts.
//
// The report states, from the numbers the run produced and nothing else:
//   - the core's figures for the scenario (segment, history, histories, recurrent
//     slot, dense layers sharing one arena, the arena's parts) and the heap
//     allocations counted over the measured steps;
//   - inter-token latency per variant, context length and concurrency;
//   - what headroom buys: latency without headroom ÷ latency with it, per cell;
//   - where ActiveKV becomes slower per token than stock (the crossover), per
//     concurrency, from the fine probes;
//   - the saturating workload: evictions over time for naive and ActiveKV,
//     throughput of each, and the headroom takings.
// Text for people (stdout), JSON for programs (--json, results.json), HTML for
// both (index.html: the same tables plus SVG charts, one self-contained file).
#pragma once

#include <optional>
#include <string>

#include "sim/cost_model.hpp"
#include "sim/saturation.hpp"
#include "sim/sweep.hpp"

namespace activekv::sim {

struct SimReport {
  SweepResult sweep;
  std::optional<SaturationResult> saturation;
  CostModel cost;
  std::string command;  // the command line that produced it
};

// Latency without headroom ÷ with headroom for one cell; 0 when either did not run.
double headroom_speedup(const SweepResult& sweep, std::uint32_t concurrency, std::uint32_t context_tokens);

std::string report_text(const SimReport& report);
std::string report_json(const SimReport& report, int indent = 2);
std::string report_html(const SimReport& report);

}  // namespace activekv::sim
