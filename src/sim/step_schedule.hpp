// step_schedule.hpp — one decode step, issued onto the simulated device in the engine's order.
//
// The residency plan (from the core) says, per scheduled context and dense
// layer, which bytes are read in place and which pass through staging tiles.
// This file turns that plain data into commands on the Timeline, in the order
// an engine issues them (DESIGN.md "One step"):
//
//   for each dense layer l:
//     compute: the non-attention work before l (the step's share, 1/dense_layers)
//     compute: attention over the resident pages of every context   (never waits on a copy)
//     for each context with staged bytes, tile by tile:
//       acquire a tile lease (waits for the fence of the slot's last user)
//       h2d: the host ranges of the tile          ┐ overlap: different engines
//       d2d: retained pages materialised into it  ┘ (d2d shares compute unless a d2d queue exists)
//       compute: attention over the tile, waiting on both fences
//       d2d: newly retained pages captured from the tile into headroom
//       release the lease on the last of those fences
//     d2h: the tail rows written back, after the layer's attention signalled
//
// Copies are issued ahead (the host never waits); only tile leases throttle
// them. The step's inter-token latency is when the last compute command
// signals: the token exists then. Write-backs may still be in flight; they
// overlap the next step, and the next step's copies queue behind them on the
// link only in the d2h direction, so they rarely matter.
//
// Zero allocations: the work table is a span the caller owns.
#pragma once

#include <cstdint>
#include <span>

#include "sim/timeline.hpp"

namespace activekv::sim {

// What one context does for one dense layer in one step. Byte counts are K+V rows.
struct LayerWork {
  std::uint64_t resident_bytes = 0;       // read in place (pool pages)
  std::uint64_t staged_tokens = 0;        // tokens that pass through tiles this step
  std::uint64_t h2d_bytes = 0;            // host ranges copied into tiles
  std::uint32_t h2d_copies = 0;           // contiguous host ranges (one command each)
  std::uint64_t d2d_bytes = 0;            // retained pages materialised into tiles
  std::uint32_t d2d_copies = 0;
  std::uint64_t capture_bytes = 0;        // tile → headroom copies that retain pages
  std::uint32_t capture_copies = 0;
  std::uint64_t writeback_bytes = 0;      // changed tail rows, device → host
  std::uint32_t writeback_copies = 0;
};

struct StepShape {
  std::uint32_t contexts = 0;             // scheduled contexts
  std::uint32_t dense_layers = 0;
  std::uint64_t tile_tokens = 0;          // T
  std::uint64_t row_bytes = 0;
  std::uint32_t tokens = 0;               // tokens the step computes (prefill chunks in full); 0: one per context
};

struct StepTiming {
  double start_seconds = 0.0;
  double end_seconds = 0.0;               // last compute fence: the token exists
  double compute_busy_seconds = 0.0;      // this step's compute-queue work
  double h2d_busy_seconds = 0.0;
  double d2d_busy_seconds = 0.0;
  double d2h_busy_seconds = 0.0;
  double stall_seconds = 0.0;             // compute idle while waiting on a copy fence
  std::uint64_t tiles_used = 0;
  double seconds() const noexcept { return end_seconds - start_seconds; }
};

// Issues one step that begins at `start_seconds`; `work` is layer-major:
// work[l × contexts + c]. Returns its timing; all tile leases are back on return.
StepTiming schedule_step(Timeline& timeline, const StepShape& shape, std::span<const LayerWork> work,
                         double start_seconds);

}  // namespace activekv::sim
