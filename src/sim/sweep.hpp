// sweep.hpp — inter-token latency across context lengths and concurrencies, three variants.
//
// For each concurrency N and each ActiveKV variant, one CoreInstance admits N
// contexts through the core's admission and walks them from empty to the
// longest length: prefill in chunks (planned by the core, not timed), and at
// each measurement point a few decode steps that are planned by the core,
// translated into LayerWork and scheduled on the simulated device. Latency is
// the mean of the measured steps. Retained pages captured at one point stay
// for the next (they are immutable), as they would in a server.
//
// Stock needs no core: every context's KV is read in place, and a cell exists
// only while N contexts of that length fit beside the weights.
//
// Besides the sweep's lengths, every `probe_tokens` tokens one step is
// measured for the crossover: the first probe where ActiveKV is more than
// `crossover_margin` slower per token than stock (while stock still fits).
//
// The heap allocations counted are those of the measured decode steps
// (planning, translating, scheduling): invariant 7 says zero.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "activekv/memory_plan.hpp"
#include "sim/scenario.hpp"

namespace activekv::sim {

struct CellResult {
  Variant variant = Variant::stock;
  std::uint32_t concurrency = 0;
  std::uint32_t context_tokens = 0;
  bool ran = false;                       // stock: fits; ActiveKV: admitted and planned
  std::string note;                       // why a cell did not run
  double itl_seconds = 0.0;               // mean inter-token latency over the measured steps
  double h2d_bytes_per_step = 0.0;        // staged over the link
  double d2d_bytes_per_step = 0.0;        // materialised from retained history
  double resident_bytes_per_step = 0.0;   // read in place
  double h2d_busy_seconds = 0.0;          // per step
  double compute_busy_seconds = 0.0;      // per step
  double stall_seconds = 0.0;             // per step: compute waiting on a copy
  std::uint64_t heap_allocations = 0;     // during the measured steps
  std::uint64_t retained_pages = 0;       // headroom variant: pages retained at the end
};

struct ProbePoint {
  std::uint32_t context_tokens = 0;
  double stock_seconds = 0.0;             // 0 when stock does not fit
  double activekv_seconds = 0.0;
};

struct Crossover {
  Variant variant = Variant::activekv;
  std::uint32_t concurrency = 0;
  std::uint32_t slower_from_tokens = 0;   // first probe where ActiveKV is slower by > margin; 0: none
  std::uint32_t not_slower_until_tokens = 0;  // the probe before it
  std::uint32_t stock_fits_until_tokens = 0;  // longest probe stock can hold N contexts at
  std::vector<ProbePoint> probes;
};

struct SweepOptions {
  std::uint32_t probe_tokens = 0;         // 0: max_context / 32
  double crossover_margin = 0.05;         // "slower" means by more than 5%
  bool probes = true;                     // off for quick runs
};

struct SweepResult {
  Scenario scenario;
  MemoryPlan plan;                        // ActiveKV, no headroom (the core's own figures)
  MemoryPlan plan_headroom;               // ActiveKV with headroom
  std::vector<CellResult> cells;          // variant-major, then concurrency, then length
  std::vector<Crossover> crossovers;      // per ActiveKV variant and concurrency
  std::uint64_t measured_steps = 0;
  std::uint64_t heap_allocations = 0;     // over every measured ActiveKV step
  double wall_seconds = 0.0;

  const CellResult* find(Variant variant, std::uint32_t concurrency, std::uint32_t context_tokens) const noexcept;
};

// One stock decode step: N contexts of `context_tokens`, all KV resident. Seconds.
double stock_step_seconds(const Scenario& scenario, std::uint32_t concurrency, std::uint32_t context_tokens);

Result<SweepResult> run_sweep(const Scenario& scenario, const SweepOptions& options = {});

}  // namespace activekv::sim
