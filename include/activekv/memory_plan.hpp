// memory_plan.hpp — the explicit memory plan: every byte the operator gives, accounted for.
//
// A MemoryPlan is computed once, at startup, from MemorySettings, and never
// changes. It is plain data: the host-pool formula with its terms, the device
// arena's layout with byte offsets, and the per-context budgets in pages.
//
// Host pool (DESIGN.md "The memory plan"):
//   prefix_cache_pages = floor(prefix_cache_bytes / (page_tokens × row_bytes × dense_layers))
//                       (the host prefix cache, docs/PREFIX.md: carved off first; 0 when off; with
//                       recurrent state half its bytes hold prefix_cache_states state checkpoints and
//                       the pages get the rest: docs/PREFIX_CACHE.md "Recurrent state")
//   segment_bytes     = max_context_tokens × row_bytes
//   segments          = floor((host_pool_bytes − prefix_cache_bytes) / segment_bytes)
//   histories         = floor(segments / dense_layers)
//   With window layers (Gemma 3's local layers, window_plan.hpp) a window layer's host share is a
//   ring of ring_tokens = min(max_context, (ceil(W / P) + 1) × P) rows; token t sits in ring slot
//   t mod ring_tokens, and a query at p reads only (p − W, p], which the ring always holds:
//   history_bytes     = full_layers × segment_bytes + window_layers × ring_tokens × row_bytes
//   histories         = floor((host_pool_bytes − prefix_cache_bytes) / history_bytes)
//   leftover_segments = segments − histories × dense_layers
//   concurrency       = min(max_seqs, histories − retained_histories)
//   history_slots     = concurrency + retained_histories   (the histories mapped; the extra ones
//                       never run a context, they only keep retained prefixes: docs/PREFIX.md)
//   pinned            = history_slots × history_bytes + prefix_cache_pages × prefix_cache_page_bytes
//                       + history_slots × state_bytes_history (hybrid models: state_plan.hpp)
//                       (the cache's pages lie after the histories, the state area after the cache)
//
// Device arena, one allocation, parts in this order, each non-empty part aligned to arena_alignment_bytes:
//   staging tiles   tiles × tile_tokens × row_bytes
//   page pool       pages × page_tokens × row_bytes
//   recurrent slots concurrency × recurrent_state_bytes (host concurrency: one per running context)
//   page summaries  histories × dense_layers × pages × summary page bytes (sparse only; else empty)
//   headroom        headroom_bytes (explicit, revocable; may be 0)
// The page pool gets what the device pool leaves after the other parts.
//
// Budgets, per context, in pages across all dense layers: floor ≤ target ≤ burst.
//   floor_pages_per_layer = 1 (sink) + pages_spanned_max(chunk_tokens)   (the tail pages one step writes)
//   floor_pages           = floor_pages_per_layer × dense_layers (the minimum; the operator may ask more)
//
// Every refusal names the setting at fault and says what to change, with numbers.
// An automatic device pool size ("auto", 0, "50%") is refused: it would hide the
// decision the operator is making about how much device memory KV may own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "activekv/geometry.hpp"
#include "activekv/result.hpp"
#include "activekv/state_plan.hpp"

namespace activekv {

inline constexpr std::uint64_t arena_alignment_bytes = 4096;  // each arena part starts on this boundary
inline constexpr std::uint32_t page_tokens_default = 16;
inline constexpr std::uint32_t tile_tokens_default = 32768;  // DESIGN.md seed default; clipped to max context
inline constexpr std::uint32_t tiles_default = 2;             // double buffering: copy into one while attending the other
inline constexpr std::uint32_t chunk_tokens_default = 256;    // most tokens one context appends in one step
inline constexpr std::uint32_t promoted_pages_per_layer_default = 32;
inline constexpr std::uint32_t queue_max_default = 1024;

// What the operator states. Zero in a budget field means "derive" (documented in docs/CORE.md);
// zero in a size field is refused.
struct MemorySettings {
  Geometry geometry;
  std::uint64_t host_pool_bytes = 0;        // --host-pool
  std::uint64_t device_pool_bytes = 0;      // --device-pool (the whole arena)
  std::uint64_t headroom_bytes = 0;         // --headroom (part of the device pool, lent to retained history)
  std::uint32_t page_tokens = page_tokens_default;   // --page-tokens (P)
  std::uint32_t tile_tokens = 0;            // --tile-tokens (T); 0 = min(32768, max context)
  std::uint32_t tiles = tiles_default;      // --tiles
  std::uint32_t max_context_tokens = 0;     // --max-context
  std::uint32_t max_seqs = 1;               // --max-seqs
  std::uint32_t chunk_tokens = chunk_tokens_default;  // --chunk-tokens: most tokens a context appends per step
  std::uint32_t promoted_pages_per_layer = promoted_pages_per_layer_default;  // --promoted-pages
  std::uint32_t queue_max = queue_max_default;        // --queue-max: waiting requests held at once
  std::uint64_t floor_pages = 0;            // --floor-pages  (0 = the minimum floor)
  std::uint64_t target_pages = 0;           // --target-pages (0 = an even share of the pool)
  std::uint64_t burst_pages = 0;            // --burst-pages  (0 = all pages a max-length context can use)
  bool sparse_summaries = false;            // sparse attention keeps page summaries (docs/SPARSE.md; plan --sparse)
  std::uint32_t retained_histories = 0;     // retained_histories: host histories beyond the concurrency, kept
                                            // only for retained prefixes (docs/PREFIX.md)
  std::uint64_t prefix_cache_bytes = 0;     // prefix_cache / --prefix-cache: the host prefix cache's part of the
                                            // host pool (docs/PREFIX.md); 0: no cache
  // Hybrid models (state_plan.hpp): each history keeps recurrent-state checkpoints on the host, for
  // prefix reuse (the KV runtime sets it when prefix reuse is on; plan: --state-checkpoint-pages).
  // Off: no state is kept on the host (no context resumes), and the host formula is the dense one.
  bool state_checkpoints = false;
  std::uint32_t state_checkpoint_pages = 0;  // --state-checkpoint-pages K: also one every K pages
};

struct HostPoolPlan {
  std::uint64_t row_bytes = 0;
  std::uint32_t max_context_tokens = 0;
  std::uint64_t segment_bytes = 0;      // max_context_tokens × row_bytes
  std::uint64_t host_pool_bytes = 0;
  std::uint64_t segments = 0;           // floor(host_pool_bytes / segment_bytes)
  std::uint32_t dense_layers = 0;
  std::uint64_t history_bytes = 0;      // dense_layers × segment_bytes
  std::uint64_t histories = 0;          // floor(segments / dense_layers)
  std::uint64_t leftover_segments = 0;  // segments − histories × dense_layers
  std::uint32_t max_seqs = 0;
  std::uint32_t retained_histories = 0; // histories kept only for retained prefixes (never run a context)
  std::uint32_t concurrency = 0;        // min(max_seqs, histories − retained_histories): contexts that may run
  std::uint32_t history_slots = 0;      // concurrency + retained_histories: the histories mapped
  std::uint64_t prefix_cache_bytes = 0;       // stated: the host prefix cache's part of the pool (0: none)
  std::uint64_t prefix_cache_page_bytes = 0;  // page_tokens × row_bytes × dense_layers: one page index, every layer
  std::uint32_t prefix_cache_pages = 0;       // floor((prefix_cache_bytes − its states' bytes) / prefix_cache_page_bytes)
  // Hybrid models: the cache's recurrent-state checkpoints, after its pages (half its bytes):
  //   prefix_cache_states = floor(prefix_cache_bytes / 2 / state_bytes)   (0 without recurrent state)
  std::uint32_t prefix_cache_states = 0;
  std::uint64_t prefix_cache_state_bytes = 0;  // one state (the geometry's recurrent_state_bytes)
  std::uint64_t prefix_cache_offset = 0;      // history_slots × history_bytes: the cache's pages follow the histories
  std::uint64_t used_bytes = 0;         // history_slots × history_bytes + the cache's pages (what is mapped and pinned)
  // Window layers (0 without): each keeps a ring of ring_tokens rows instead of a segment.
  LayerKinds kinds{};
  std::uint32_t window_layers = 0;
  std::uint32_t ring_tokens = 0;        // min(max_context, (ceil(W / P) + 1) × P); 0: no window layers
  std::uint64_t ring_bytes = 0;         // ring_tokens × row_bytes

  bool is_ring(std::uint32_t layer) const noexcept { return ring_tokens != 0 && kinds.is_window(layer); }
  // Tokens the layer's host share holds: a ring's, or max context.
  std::uint32_t layer_tokens(std::uint32_t layer) const noexcept {
    return is_ring(layer) ? ring_tokens : max_context_tokens;
  }
  std::uint64_t layer_bytes(std::uint32_t layer) const noexcept { return is_ring(layer) ? ring_bytes : segment_bytes; }
  // Byte offset of history h, dense layer l, token t (DESIGN "Shared data layout"): the history's
  // layers in order, full layers a segment each, window layers a ring each (slot t mod ring_tokens).
  std::uint64_t segment_offset(std::uint32_t history, std::uint32_t layer) const noexcept {
    const std::uint64_t base = static_cast<std::uint64_t>(history) * history_bytes;
    if (ring_tokens == 0) return base + static_cast<std::uint64_t>(layer) * segment_bytes;
    const std::uint32_t rings = kinds.window_layers_below(layer);
    return base + static_cast<std::uint64_t>(layer - rings) * segment_bytes + static_cast<std::uint64_t>(rings) * ring_bytes;
  }
  std::uint64_t row_offset(std::uint32_t history, std::uint32_t layer, std::uint32_t token) const noexcept {
    const std::uint32_t slot = is_ring(layer) ? token % ring_tokens : token;
    return segment_offset(history, layer) + static_cast<std::uint64_t>(slot) * row_bytes;
  }
  // The first logical page of layer `layer` that a query at `first_query` or later can see: for a
  // window layer the page of first_query − W + 1 (pages below it are neither staged nor attended),
  // else 0.
  std::uint32_t first_page_seen(std::uint32_t layer, std::uint32_t first_query, std::uint32_t page_tokens) const noexcept {
    const std::uint32_t w = ring_tokens != 0 ? kinds.window_of(layer) : 0;
    return w != 0 && first_query + 1 > w ? (first_query + 1 - w) / page_tokens : 0;
  }
  // Whether the layer's host share still holds token t of a history `length` tokens long (a ring
  // holds the last ring_tokens written; a segment every token).
  bool holds(std::uint32_t layer, std::uint32_t length, std::uint32_t token) const noexcept {
    return token < length && (!is_ring(layer) || length - token <= ring_tokens);
  }
};

struct ArenaPart {
  std::uint64_t offset_bytes = 0;
  std::uint64_t size_bytes = 0;
};

struct ArenaPlan {
  std::uint64_t device_pool_bytes = 0;  // what the operator gave
  std::uint32_t page_tokens = 0;        // P
  std::uint64_t page_bytes = 0;         // P × row_bytes
  std::uint32_t tile_tokens = 0;        // T (a multiple of P)
  std::uint64_t tile_bytes = 0;         // T × row_bytes
  std::uint32_t tile_pages = 0;         // T / P: whole pages per tile
  std::uint32_t tiles = 0;              // staging tile slots
  std::uint32_t pages = 0;              // pool pages
  std::uint32_t recurrent_slots = 0;    // = host concurrency when the model has recurrent state, else 0
                                        //   (bound per running context at admission: state_plan.hpp)
  std::uint64_t recurrent_slot_bytes = 0;
  ArenaPart staging_tiles;              // tiles × tile_bytes
  ArenaPart page_pool;                  // pages × page_bytes
  ArenaPart recurrent;                  // recurrent_slots × recurrent_slot_bytes
  ArenaPart summaries;                  // sparse attention's page summaries (SummaryPlan::bytes; empty when off)
  ArenaPart headroom;                   // headroom_bytes
  std::uint64_t used_bytes = 0;         // end of the last part
  std::uint64_t unused_bytes = 0;       // device_pool_bytes − used_bytes (alignment and the page remainder)

  std::uint64_t tile_offset(std::uint32_t slot) const noexcept { return staging_tiles.offset_bytes + slot * tile_bytes; }
  std::uint64_t page_offset(std::uint32_t page) const noexcept { return page_pool.offset_bytes + page * page_bytes; }
  std::uint64_t recurrent_offset(std::uint32_t slot) const noexcept {
    return recurrent.offset_bytes + slot * recurrent_slot_bytes;
  }
};

struct BudgetPlan {
  std::uint32_t floor_pages_per_layer = 0;  // 1 sink + pages_spanned_max(chunk_tokens)
  std::uint64_t floor_pages_min = 0;        // floor_pages_per_layer × dense_layers
  std::uint64_t floor_pages = 0;            // default floor (≥ floor_pages_min)
  std::uint64_t target_pages = 0;           // default target
  std::uint64_t burst_pages = 0;            // default burst
  std::uint32_t pages_per_layer_max = 0;    // max_context_tokens / P: logical pages of one segment
  std::uint32_t layer_pages_max = 0;        // most pages one layer of one context may hold: min(pages_per_layer_max, ceil(burst/L))
  std::uint64_t floors_that_fit = 0;        // floor(pages / floor_pages)
  std::uint32_t concurrency = 0;            // min(host concurrency, floors_that_fit): contexts that run at once
};

// Sparse attention's page summaries (docs/SPARSE.md): per history, dense layer and logical page
// (one more than a max-length context holds, for a partial tail), per KV head the min and max
// of each key dimension, 16-bit rounded outward. An arena part of their
// own (ArenaPlan::summaries), mirrored from the host copy the runtime keeps; zero when sparse is off.
struct SummaryPlan {
  std::uint32_t histories = 0;        // = host concurrency
  std::uint32_t pages_per_layer = 0;  // max_context / page_tokens + 1
  std::uint64_t page_bytes = 0;       // 2 × kv_heads × head_dim × 2 B (16-bit min and max)
  std::uint64_t bytes = 0;            // histories × dense_layers × pages_per_layer × page_bytes; 0 when off
};

struct MemoryPlan {
  Geometry geometry;
  HostPoolPlan host;
  ArenaPlan arena;
  BudgetPlan budget;
  SummaryPlan summaries;
  StatePlan state;                      // recurrent state: device slots, host checkpoints (state_plan.hpp)
  std::uint32_t chunk_tokens = 0;
  std::uint32_t promoted_pages_per_layer = 0;
  std::uint32_t queue_max = 0;
};

// Logical pages that `tokens` consecutive tokens can touch, over every alignment:
// floor((tokens − 1 + P − 1) / P) + 1 (1 for one decode token).
std::uint32_t pages_spanned_max(std::uint32_t tokens, std::uint32_t page_tokens) noexcept;

// The smallest device pool these settings can run one context in, and the one that runs
// max_seqs contexts at their floors; used to say how to choose a size.
std::uint64_t device_pool_minimum_bytes(const MemorySettings& settings, std::uint32_t contexts);

// The arena bytes the page summaries' part takes with these settings, alignment included (0 when
// sparse_summaries is off): what to add to a device pool sized for the exact plan.
std::uint64_t summary_part_bytes(const MemorySettings& settings) noexcept;

// Parses --device-pool. Refuses an automatic size ("auto", "0", "50%", "max") with the why
// and a suggested explicit size computed from the other settings.
Result<std::uint64_t> parse_device_pool(std::string_view text, const MemorySettings& settings);

// Validates the settings and computes the plan, or refuses naming the setting and its minimum.
Result<MemoryPlan> make_memory_plan(const MemorySettings& settings);

// The plan printed for people (formulas with the numbers filled in, the arena layout with
// offsets, concurrency, floors/targets/bursts) and as JSON (keys named after the formula's terms).
std::string format_memory_plan(const MemoryPlan& plan);
std::string memory_plan_json(const MemoryPlan& plan, int indent = 2);

}  // namespace activekv
