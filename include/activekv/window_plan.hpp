// window_plan.hpp — what a window layer costs: a ring of its window, not a history.
//
// A sliding-window layer of W tokens (Gemma 3's local layers) never reads a key more than
// W − 1 positions back, so its host copy needs only a ring of whole pages that covers the
// window from any query's page boundary (DESIGN.md "Layer kinds"):
//
//   ring_tokens   = min(max_context, (ceil(W / P) + 1) × P)        (W + P when P divides W)
//   history_bytes = full_layers × segment_bytes + window_layers × ring_tokens × row_bytes
//   histories     = floor(host pool for histories / history_bytes)
//
// and on the device a window layer needs at most ring_tokens / P pages of a context:
//
//   burst_pages   = full_layers × pages_per_layer_max + window_layers × ring_pages
//
// The plan computes these beside the full-layer figures (every layer a segment): the host pool
// reserves the rings (memory_plan.hpp), so `histories` here is the plan's. Plain data, computed
// from a MemoryPlan.
#pragma once

#include <cstdint>
#include <string>

#include "activekv/memory_plan.hpp"

namespace activekv {

struct WindowPlan {
  std::uint32_t full_layers = 0;         // dense layers that attend to the whole history
  std::uint32_t window_layers = 0;       // dense layers that attend to the last window_tokens
  std::uint32_t window_tokens = 0;       // W
  std::uint32_t page_tokens = 0;         // P
  std::uint32_t ring_tokens = 0;         // min(max_context, (ceil(W / P) + 1) × P)
  std::uint32_t ring_pages = 0;          // ring_tokens / P (rounded up at the context's end)
  std::uint64_t segment_bytes = 0;       // max_context × row_bytes (a full layer's host share)
  std::uint64_t ring_bytes = 0;          // ring_tokens × row_bytes (a window layer's)
  std::uint64_t history_bytes = 0;       // full_layers × segment_bytes + window_layers × ring_bytes
  std::uint64_t history_bytes_full = 0;  // dense_layers × segment_bytes: every layer a segment
  std::uint64_t pool_bytes = 0;          // the host pool less the prefix cache's part
  std::uint64_t histories = 0;           // floor(pool_bytes / history_bytes)
  std::uint64_t histories_full = 0;      // floor(pool_bytes / history_bytes_full)
  std::uint32_t pages_per_layer_max = 0; // a full layer's pages at max context
  std::uint64_t burst_pages = 0;         // full_layers × pages_per_layer_max + window_layers × ring_pages
  std::uint64_t burst_pages_full = 0;    // dense_layers × pages_per_layer_max
};

// The window layers' figures of `plan` (all window fields 0 when the geometry has none).
WindowPlan window_plan(const MemoryPlan& plan) noexcept;

// The formula with the plan's numbers filled in ("" when the geometry has no window layers).
std::string format_window_plan(const WindowPlan& w);

}  // namespace activekv
