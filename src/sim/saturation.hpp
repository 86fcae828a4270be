// saturation.hpp — a saturating workload: ActiveKV's admission against admit-and-evict.
//
// An endless queue of identical requests (prompt_tokens in, output_tokens out)
// is served for `steps` steps by two servers on the same card:
//
//   naive     all KV on the device (the stock memory), admits while pages are
//             free, evicts the newest request and recomputes it on overflow
//             (naive_admission.hpp). The memory-constrained serving model in
//             related-research.txt predicts a limit cycle with evictions.
//   ActiveKV  the real core: a request is admitted only when a host history is
//             free and its floor fits in the pool (BudgetManager::submit);
//             floors are never taken back, so nothing is ever evicted. Prefill
//             runs in chunks and decode one token a step, every step planned by
//             the core and timed on the simulated device; with headroom,
//             retained history is captured as pages cross PCIe.
//
// Headroom pressure: while any context is in prefill, its workspace
// (prefill_workspace_bytes) takes headroom back; when no prefill runs the pages
// are restored. Every taking is counted by the core's Headroom. The host copy is
// authoritative, so revoked retained pages are simply staged again.
//
// Each step's seconds come from the cost model: for ActiveKV from the step
// schedule of the core's plan; for naive from the same charges applied to its
// resident KV plus (re)prefill tokens at the matrix rate. Counts are kept per
// window of `window_steps` for the chart (evictions over time).
#pragma once

#include <cstdint>
#include <vector>

#include "activekv/result.hpp"
#include "sim/scenario.hpp"

namespace activekv::sim {

struct SaturationSettings {
  std::uint32_t prompt_tokens = 2048;
  std::uint32_t output_tokens = 2048;
  std::uint32_t steps = 8192;
  std::uint32_t window_steps = 256;
  std::uint32_t naive_max_seqs = 256;          // vLLM's default max_num_seqs
  std::uint64_t prefill_workspace_bytes = 0;   // headroom taken back while a prefill runs; 0: none
  Variant variant = Variant::activekv_headroom;
};

struct SaturationWindow {
  std::uint32_t first_step = 0;
  double naive_seconds = 0.0, activekv_seconds = 0.0;  // simulated time at the window's end
  std::uint32_t naive_evictions = 0, activekv_evictions = 0;
  std::uint32_t naive_running_max = 0, activekv_running_max = 0;
  std::uint32_t naive_running_min = 0, activekv_running_min = 0;
  std::uint64_t naive_decoded = 0, activekv_decoded = 0;
  std::uint64_t naive_recomputed = 0;
  std::uint64_t headroom_takings = 0;                  // in this window
};

struct SaturationTotals {
  std::uint64_t decoded_tokens = 0;
  std::uint64_t finished = 0;
  std::uint64_t admitted = 0;
  std::uint64_t evictions = 0;
  std::uint64_t recompute_tokens = 0;
  double seconds = 0.0;
  double tokens_per_second() const noexcept { return seconds > 0 ? static_cast<double>(decoded_tokens) / seconds : 0.0; }
};

struct SaturationResult {
  SaturationSettings settings;
  std::uint64_t naive_capacity_pages = 0;
  std::uint32_t activekv_concurrency = 0;      // the core's admitted concurrency
  SaturationTotals naive, activekv;
  std::uint64_t queued_by_core = 0;            // submissions that waited in the core's FIFO
  std::uint64_t pages_reclaimed = 0, reclaim_steps = 0;  // the core's counters
  std::uint64_t headroom_takings = 0, headroom_pages_taken = 0, headroom_pages_revoked = 0;
  std::uint64_t retained_pages_dropped = 0;
  std::uint64_t heap_allocations = 0;          // over the ActiveKV steps after the first window
  std::vector<SaturationWindow> windows;
};

Result<SaturationResult> run_saturation(const Scenario& scenario, const SaturationSettings& settings);

}  // namespace activekv::sim
