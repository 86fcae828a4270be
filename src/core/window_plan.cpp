// window_plan.cpp — the window layers' ring, history and burst figures (see window_plan.hpp).
#include "activekv/window_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "activekv/size.hpp"

namespace activekv {

WindowPlan window_plan(const MemoryPlan& plan) noexcept {
  const Geometry& g = plan.geometry;
  const HostPoolPlan& h = plan.host;
  WindowPlan w;
  w.window_layers = g.window_layers();
  w.full_layers = g.dense_layers - w.window_layers;
  w.window_tokens = g.kinds.window_tokens;
  w.page_tokens = plan.arena.page_tokens;
  w.segment_bytes = h.segment_bytes;
  w.pages_per_layer_max = plan.budget.pages_per_layer_max;
  w.history_bytes_full = std::uint64_t{g.dense_layers} * h.segment_bytes;
  w.pool_bytes = h.host_pool_bytes - std::min(h.host_pool_bytes, h.prefix_cache_bytes);
  w.burst_pages_full = std::uint64_t{g.dense_layers} * w.pages_per_layer_max;
  if (w.window_layers != 0 && w.page_tokens != 0) {
    const std::uint64_t window_pages = (std::uint64_t{w.window_tokens} + w.page_tokens - 1) / w.page_tokens;
    w.ring_tokens = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(h.max_context_tokens, (window_pages + 1) * w.page_tokens));
    w.ring_pages = (w.ring_tokens + w.page_tokens - 1) / w.page_tokens;
  }
  w.ring_bytes = std::uint64_t{w.ring_tokens} * h.row_bytes;
  w.history_bytes = std::uint64_t{w.full_layers} * h.segment_bytes + std::uint64_t{w.window_layers} * w.ring_bytes;
  w.histories = w.history_bytes == 0 ? 0 : w.pool_bytes / w.history_bytes;
  w.histories_full = w.history_bytes_full == 0 ? 0 : w.pool_bytes / w.history_bytes_full;
  w.burst_pages = std::uint64_t{w.full_layers} * w.pages_per_layer_max + std::uint64_t{w.window_layers} * w.ring_pages;
  return w;
}

std::string format_window_plan(const WindowPlan& w) {
  if (w.window_layers == 0) return {};
  std::string out = fmt::format("\nlayer kinds: {} full layers, {} window layers of {} tokens (a query at p sees (p − {}, p]):\n",
                                w.full_layers, w.window_layers, w.window_tokens, w.window_tokens);
  out += fmt::format("  ring_tokens       = min(max_context, (ceil(window {} / page {}) + 1) × {}) = {}\n", w.window_tokens,
                     w.page_tokens, w.page_tokens, w.ring_tokens);
  out += fmt::format("  ring_bytes        = ring_tokens {} × row_bytes {} = {}\n", w.ring_tokens,
                     w.ring_tokens == 0 ? 0 : w.ring_bytes / w.ring_tokens, format_bytes(w.ring_bytes));
  out += fmt::format("  history (rings)   = full {} × segment {} + window {} × ring {} = {}\n", w.full_layers,
                     format_bytes(w.segment_bytes), w.window_layers, format_bytes(w.ring_bytes), format_bytes(w.history_bytes));
  out += fmt::format("  history (full)    = dense_layers {} × segment {} = {}   ({:.1f}× the rings)\n",
                     w.full_layers + w.window_layers, format_bytes(w.segment_bytes), format_bytes(w.history_bytes_full),
                     w.history_bytes == 0 ? 0.0 : double(w.history_bytes_full) / double(w.history_bytes));
  out += fmt::format("  histories         = floor({} / history) = {} with rings, {} with full layers\n",
                     format_bytes(w.pool_bytes), w.histories, w.histories_full);
  out += fmt::format("  device burst      = full {} × {} pages + window {} × ring {} pages = {} pages (full layers: {})\n",
                     w.full_layers, w.pages_per_layer_max, w.window_layers, w.ring_pages, w.burst_pages, w.burst_pages_full);
  out += "  (the host pool above reserves the rings: a window layer's token t sits in ring slot t mod ring_tokens,\n"
         "   and attention reads only the window, which the ring always holds)\n";
  return out;
}

}  // namespace activekv
