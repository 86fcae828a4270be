// memory_plan_format.cpp — the memory plan for people (formulas with numbers) and as JSON.
//
// The text repeats each formula of DESIGN.md with the operator's numbers filled in, so a
// refusal or a lowered concurrency explains itself. The JSON keys are the formula's terms.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "activekv/memory_plan.hpp"
#include "activekv/size.hpp"
#include "activekv/window_plan.hpp"

namespace activekv {

namespace {

std::string part_line(const char* name, const ArenaPart& part, const std::string& formula) {
  return fmt::format("  {:<16} {:>14} {:>12}   {}\n", name, part.offset_bytes, format_bytes(part.size_bytes), formula);
}

nlohmann::json part_json(const ArenaPart& part) {
  return {{"offset_bytes", part.offset_bytes}, {"size_bytes", part.size_bytes}};
}

// The recurrent state's part of the plan (state_plan.hpp): the host checkpoints per history and the
// device slots; empty without recurrent state.
std::string format_state_plan(const MemoryPlan& plan) {
  const StatePlan& sp = plan.state;
  if (!sp.enabled()) return {};
  std::string out = "\nrecurrent state (hybrid: one device slot per running context; checkpoints per history on the host):\n";
  const std::string every =
      sp.checkpoint_pages == 0
          ? std::string("0 (--state-checkpoint-pages 0)")
          : fmt::format("floor(max_context {} / (K {} × page_tokens {}))", plan.host.max_context_tokens, sp.checkpoint_pages,
                        sp.page_tokens);
  if (sp.checkpoints == 0) {
    out += "  checkpoints       = 0 (prefix reuse off: no context resumes, so no state is kept on the host)\n";
  } else {
    out += fmt::format("  checkpoints       = newest 1 + prompt 1 + every K pages {} = {}\n", every, sp.checkpoints);
  }
  out += fmt::format("  state_bytes       = {} per context; per history checkpoints {} × {} = {}\n", format_bytes(sp.state_bytes),
                     sp.checkpoints, format_bytes(sp.state_bytes), format_bytes(sp.bytes_per_history));
  out += fmt::format("  histories         ≤ floor((host_pool {} − prefix_cache {}) / (history {} + state {})) (the state area counts)\n",
                     format_bytes(plan.host.host_pool_bytes), format_bytes(plan.host.prefix_cache_bytes),
                     format_bytes(plan.host.history_bytes), format_bytes(sp.bytes_per_history));
  out += fmt::format("  state area        = history_slots {} × {} = {} at host offset {} (inside pinned)\n", sp.histories,
                     format_bytes(sp.bytes_per_history), format_bytes(sp.bytes), sp.offset);
  out += fmt::format("  recurrent slots   = concurrency {} × {} = {} on the device (never pages)\n", sp.device_slots,
                     format_bytes(sp.state_bytes), format_bytes(sp.device_bytes));
  return out;
}

// " + prefix cache 2912 pages × 360 KiB" in the pinned line, beside the running histories.
std::string cache_term(const HostPoolPlan& h) {
  if (h.prefix_cache_pages == 0) return {};
  const std::string states = h.prefix_cache_states == 0 ? std::string()
                                                        : fmt::format(" + {} states × {}", h.prefix_cache_states,
                                                                      format_bytes(h.prefix_cache_state_bytes));
  return fmt::format(" + prefix cache {} pages × {}{}", h.prefix_cache_pages, format_bytes(h.prefix_cache_page_bytes), states);
}

// " + state area 32 × 882 MiB" in the pinned line (hybrid models).
std::string state_term(const MemoryPlan& plan) {
  if (plan.state.bytes == 0) return {};
  return fmt::format(" + state area {} × {}", plan.state.histories, format_bytes(plan.state.bytes_per_history));
}

}  // namespace

std::string format_memory_plan(const MemoryPlan& plan) {
  const Geometry& g = plan.geometry;
  const HostPoolPlan& h = plan.host;
  const ArenaPlan& a = plan.arena;
  const BudgetPlan& b = plan.budget;
  std::string out;
  out += fmt::format("geometry: {} dense layers, {} KV heads × head dim {}, {}", g.dense_layers, g.kv_heads, g.head_dim,
                     dtype_name(g.dtype));
  if (g.recurrent_state_bytes != 0) {
    out += fmt::format(", {} recurrent layers with {} of state per context", g.recurrent_layers,
                       format_bytes(g.recurrent_state_bytes));
  }
  out += "\n\nhost pool (pinned; the authoritative copy of every context's KV history):\n";
  out += fmt::format("  row_bytes         = 2 × kv_heads {} × head_dim {} × {} B = {} B\n", g.kv_heads, g.head_dim,
                     dtype_bytes(g.dtype), h.row_bytes);
  out += fmt::format("  segment_bytes     = max_context {} × row_bytes {} = {}\n", h.max_context_tokens, h.row_bytes,
                     format_bytes(h.segment_bytes));
  if (h.prefix_cache_pages == 0) {
    out += fmt::format("  segments          = floor(host_pool {} / segment_bytes {}) = {}\n", format_bytes(h.host_pool_bytes),
                       format_bytes(h.segment_bytes), h.segments);
  } else {
    out += fmt::format("  cache_page_bytes  = page_tokens {} × row_bytes {} × dense_layers {} = {}\n",
                       h.prefix_cache_page_bytes / h.row_bytes / h.dense_layers, h.row_bytes, h.dense_layers,
                       format_bytes(h.prefix_cache_page_bytes));
    if (h.prefix_cache_states != 0) {
      out += fmt::format("  prefix_cache_states = floor(prefix_cache {} / 2 / state_bytes {}) = {} recurrent-state "
                         "checkpoints {} (a cached prefix is adoptable up to a page boundary with a cached state; the "
                         "pages get the rest)\n",
                         format_bytes(h.prefix_cache_bytes), format_bytes(h.prefix_cache_state_bytes), h.prefix_cache_states,
                         format_bytes(std::uint64_t{h.prefix_cache_states} * h.prefix_cache_state_bytes));
    } else if (plan.state.enabled()) {
      out += "                      (a hybrid model without state checkpoints (prefix reuse off): the cache is not used)\n";
    }
    const std::uint64_t cache_tokens =
        std::uint64_t{h.prefix_cache_pages} * (h.prefix_cache_page_bytes / h.row_bytes / h.dense_layers);
    if (h.prefix_cache_states != 0) {
      out += fmt::format("  prefix_cache      = floor((prefix_cache {} − states {}) / cache_page_bytes {}) = {} pages = {} "
                         "tokens of finished histories, at their real length\n",
                         format_bytes(h.prefix_cache_bytes),
                         format_bytes(std::uint64_t{h.prefix_cache_states} * h.prefix_cache_state_bytes),
                         format_bytes(h.prefix_cache_page_bytes), h.prefix_cache_pages, cache_tokens);
    } else {
      out += fmt::format("  prefix_cache      = floor(prefix_cache {} / cache_page_bytes {}) = {} pages = {} tokens of "
                         "finished histories, at their real length\n",
                         format_bytes(h.prefix_cache_bytes), format_bytes(h.prefix_cache_page_bytes), h.prefix_cache_pages,
                         cache_tokens);
    }
    if (h.window_layers != 0) {
      out += fmt::format("                      (window layers {}: a cached page keeps their rows only if the finished "
                         "history's ring of {} tokens still held them; an adoption is cut back to the longest prefix "
                         "whose window the cache holds)\n",
                         h.window_layers, h.ring_tokens);
    }
    out += fmt::format("  segments          = floor((host_pool {} − prefix_cache {}) / segment_bytes {}) = {}\n",
                       format_bytes(h.host_pool_bytes), format_bytes(h.prefix_cache_bytes), format_bytes(h.segment_bytes),
                       h.segments);
  }
  if (h.window_layers != 0) {
    out += fmt::format("  history_bytes     = full_layers {} × segment {} + window_layers {} × ring {} = {}\n",
                       h.dense_layers - h.window_layers, format_bytes(h.segment_bytes), h.window_layers,
                       format_bytes(h.ring_bytes), format_bytes(h.history_bytes));
    out += fmt::format("  histories         = floor((host_pool {} − prefix_cache {}) / history_bytes {}) = {}\n",
                       format_bytes(h.host_pool_bytes), format_bytes(h.prefix_cache_bytes), format_bytes(h.history_bytes),
                       h.histories);
  } else if (plan.state.bytes_per_history == 0) {
    out += fmt::format("  histories         = floor(segments {} / dense_layers {}) = {}   ({} each)\n", h.segments,
                       h.dense_layers, h.histories, format_bytes(h.history_bytes));
  } else {
    out += fmt::format("  histories         = min(floor(segments {} / dense_layers {}), floor((host_pool {} − prefix_cache {}) / "
                       "(history {} + state checkpoints {}))) = {}\n",
                       h.segments, h.dense_layers, format_bytes(h.host_pool_bytes), format_bytes(h.prefix_cache_bytes),
                       format_bytes(h.history_bytes), format_bytes(plan.state.bytes_per_history), h.histories);
  }
  if (h.window_layers == 0) {
    out += fmt::format("  leftover_segments = segments {} − histories {} × dense_layers {} = {}\n", h.segments, h.histories,
                       h.dense_layers, h.leftover_segments);
  }
  if (h.retained_histories == 0) {
    out += fmt::format("  concurrency       = min(max_seqs {}, histories {}) = {}{}\n", h.max_seqs, h.histories,
                       h.concurrency, h.concurrency < h.max_seqs ? "   (lowered: further requests wait in the queue)" : "");
    out += fmt::format("  pinned            = concurrency {} × {}{}{} = {}\n", h.concurrency, format_bytes(h.history_bytes),
                       cache_term(h), state_term(plan), format_bytes(h.used_bytes));
  } else {
    out += fmt::format("  concurrency       = min(max_seqs {}, histories {} − retained_histories {}) = {}{}\n", h.max_seqs,
                       h.histories, h.retained_histories, h.concurrency,
                       h.concurrency < h.max_seqs ? "   (lowered: further requests wait in the queue)" : "");
    out += fmt::format("  history_slots     = concurrency {} + retained_histories {} = {}   (the {} extra never run a "
                       "context: they keep retained prefixes)\n",
                       h.concurrency, h.retained_histories, h.history_slots, h.retained_histories);
    out += fmt::format("  pinned            = history_slots {} × {}{}{} = {}\n", h.history_slots, format_bytes(h.history_bytes),
                       cache_term(h), state_term(plan), format_bytes(h.used_bytes));
  }

  out += format_state_plan(plan);
  out += format_window_plan(window_plan(plan));

  if (plan.summaries.bytes != 0) {
    const SummaryPlan& sp = plan.summaries;
    out += "\npage summaries (sparse attention; an arena part, and a host copy the pages are chosen from on the host):\n";
    out += fmt::format("  page_bytes        = 2 × kv_heads {} × head_dim {} × 2 B = {} B   (16-bit min and max of each key dimension)\n",
                       g.kv_heads, g.head_dim, sp.page_bytes);
    out += fmt::format("  summaries         = histories {} × dense_layers {} × pages {} × page_bytes {} = {}\n",
                       sp.histories, g.dense_layers, sp.pages_per_layer, sp.page_bytes, format_bytes(sp.bytes));
  }
  out += fmt::format("\ndevice arena (one allocation of {} at warm-up):\n", format_bytes(a.device_pool_bytes));
  out += fmt::format("  {:<16} {:>14} {:>12}   {}\n", "part", "offset (B)", "size", "formula");
  out += part_line("staging tiles", a.staging_tiles,
                   fmt::format("tiles {} × tile_tokens {} × row_bytes {}", a.tiles, a.tile_tokens, h.row_bytes));
  out += part_line("page pool", a.page_pool,
                   fmt::format("pages {} × page_tokens {} × row_bytes {} ({} pages)", a.pages, a.page_tokens,
                               h.row_bytes, format_bytes(a.page_bytes)));
  out += part_line("recurrent slots", a.recurrent,
                   fmt::format("slots {} × {}", a.recurrent_slots, format_bytes(a.recurrent_slot_bytes)));
  if (a.summaries.size_bytes != 0) {
    out += part_line("page summaries", a.summaries,
                     fmt::format("histories {} × dense_layers {} × pages {} × {} B", plan.summaries.histories,
                                 g.dense_layers, plan.summaries.pages_per_layer, plan.summaries.page_bytes));
  }
  out += part_line("headroom", a.headroom, "stated by --headroom; revocable");
  out += fmt::format("  {:<16} {:>14} {:>12}   alignment ({} B) and the remainder below one page\n", "unused",
                     a.used_bytes, format_bytes(a.unused_bytes), arena_alignment_bytes);

  out += fmt::format("\nbudgets per context (pages across {} dense layers; one page = {} tokens = {}):\n", g.dense_layers,
                     a.page_tokens, format_bytes(a.page_bytes));
  out += fmt::format("  floor  {:>8} pages ({})   minimum {} = {} layers × (1 sink + {} tail pages for a {}-token step)\n",
                     b.floor_pages, format_bytes(b.floor_pages * a.page_bytes), b.floor_pages_min, g.dense_layers,
                     b.floor_pages_per_layer - 1, plan.chunk_tokens);
  out += fmt::format("  target {:>8} pages ({})   held by right\n", b.target_pages, format_bytes(b.target_pages * a.page_bytes));
  out += fmt::format("  burst  {:>8} pages ({})   borrowed while pages are free; at most {} pages per layer\n",
                     b.burst_pages, format_bytes(b.burst_pages * a.page_bytes), b.layer_pages_max);
  out += fmt::format("  floors that fit = floor(pages {} / floor {}) = {}\n", a.pages, b.floor_pages, b.floors_that_fit);
  out += fmt::format("  running at once = min(host concurrency {}, floors that fit {}) = {}{}\n", h.concurrency,
                     b.floors_that_fit, b.concurrency,
                     b.concurrency < h.concurrency ? "   (the device pool lowers it: further requests queue)" : "");
  return out;
}

std::string memory_plan_json(const MemoryPlan& plan, int indent) {
  const Geometry& g = plan.geometry;
  const HostPoolPlan& h = plan.host;
  const ArenaPlan& a = plan.arena;
  const BudgetPlan& b = plan.budget;
  nlohmann::json j;
  j["geometry"] = {{"dense_layers", g.dense_layers},   {"recurrent_layers", g.recurrent_layers},
                   {"kv_heads", g.kv_heads},           {"head_dim", g.head_dim},
                   {"dtype", dtype_name(g.dtype)},     {"recurrent_state_bytes", g.recurrent_state_bytes},
                   {"row_bytes", g.row_bytes()}};
  j["host_pool"] = {{"row_bytes", h.row_bytes},
                    {"max_context_tokens", h.max_context_tokens},
                    {"segment_bytes", h.segment_bytes},
                    {"host_pool_bytes", h.host_pool_bytes},
                    {"segments", h.segments},
                    {"dense_layers", h.dense_layers},
                    {"history_bytes", h.history_bytes},
                    {"histories", h.histories},
                    {"leftover_segments", h.leftover_segments},
                    {"max_seqs", h.max_seqs},
                    {"concurrency", h.concurrency},
                    {"retained_histories", h.retained_histories},
                    {"history_slots", h.history_slots},
                    {"prefix_cache_bytes", h.prefix_cache_bytes},
                    {"prefix_cache_page_bytes", h.prefix_cache_page_bytes},
                    {"prefix_cache_pages", h.prefix_cache_pages},
                    {"prefix_cache_states", h.prefix_cache_states},
                    {"prefix_cache_state_bytes", h.prefix_cache_state_bytes},
                    {"pinned_bytes", h.used_bytes}};
  j["arena"] = {{"device_pool_bytes", a.device_pool_bytes},
                {"alignment_bytes", arena_alignment_bytes},
                {"page_tokens", a.page_tokens},
                {"page_bytes", a.page_bytes},
                {"tile_tokens", a.tile_tokens},
                {"tile_bytes", a.tile_bytes},
                {"tiles", a.tiles},
                {"pages", a.pages},
                {"recurrent_slots", a.recurrent_slots},
                {"recurrent_slot_bytes", a.recurrent_slot_bytes},
                {"staging_tiles", part_json(a.staging_tiles)},
                {"page_pool", part_json(a.page_pool)},
                {"recurrent", part_json(a.recurrent)},
                {"headroom", part_json(a.headroom)},
                {"used_bytes", a.used_bytes},
                {"unused_bytes", a.unused_bytes}};
  if (a.summaries.size_bytes != 0) j["arena"]["page_summaries"] = part_json(a.summaries);
  j["budget"] = {{"floor_pages", b.floor_pages},
                 {"floor_pages_min", b.floor_pages_min},
                 {"floor_pages_per_layer", b.floor_pages_per_layer},
                 {"target_pages", b.target_pages},
                 {"burst_pages", b.burst_pages},
                 {"layer_pages_max", b.layer_pages_max},
                 {"pages_per_layer_max", b.pages_per_layer_max},
                 {"floors_that_fit", b.floors_that_fit},
                 {"concurrency", b.concurrency}};
  if (g.window_layers() != 0) {
    const WindowPlan w = window_plan(plan);
    j["layer_kinds"] = {{"full_layers", w.full_layers},
                        {"window_layers", w.window_layers},
                        {"window_tokens", w.window_tokens},
                        {"ring_tokens", w.ring_tokens},
                        {"ring_pages", w.ring_pages},
                        {"ring_bytes", w.ring_bytes},
                        {"history_bytes", w.history_bytes},
                        {"history_bytes_full", w.history_bytes_full},
                        {"histories", w.histories},
                        {"histories_full", w.histories_full},
                        {"burst_pages", w.burst_pages},
                        {"burst_pages_full", w.burst_pages_full}};
  }
  j["chunk_tokens"] = plan.chunk_tokens;
  j["concurrency"] = b.concurrency;
  if (plan.summaries.bytes != 0) {
    j["page_summaries"] = {{"histories", plan.summaries.histories},
                           {"pages_per_layer", plan.summaries.pages_per_layer},
                           {"page_bytes", plan.summaries.page_bytes},
                           {"bytes", plan.summaries.bytes}};
  }
  if (plan.state.enabled()) {
    const StatePlan& sp = plan.state;
    j["recurrent_state"] = {{"state_bytes", sp.state_bytes},         {"checkpoint_pages", sp.checkpoint_pages},
                            {"checkpoints", sp.checkpoints},         {"bytes_per_history", sp.bytes_per_history},
                            {"histories", sp.histories},             {"host_offset", sp.offset},
                            {"host_bytes", sp.bytes},                {"device_slots", sp.device_slots},
                            {"device_bytes", sp.device_bytes}};
  }
  return j.dump(indent);
}

}  // namespace activekv
