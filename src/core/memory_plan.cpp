// memory_plan.cpp — validating the settings and computing the plan, or refusing with the fix.
//
// Every figure of the plan is computed here, once, in 128-bit arithmetic where an
// operator's numbers are multiplied, so a huge value is refused instead of wrapping.
// The order of the checks is the order an operator fixes them: geometry, context and
// page shape, host pool, device pool, budgets.
#include "activekv/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "activekv/page_pool.hpp"
#include "activekv/size.hpp"

namespace activekv {

namespace {

__extension__ typedef unsigned __int128 u128;
constexpr u128 u64_max = static_cast<u128>(~0ull);

std::uint64_t align_up(std::uint64_t bytes) noexcept {
  return (bytes + arena_alignment_bytes - 1) / arena_alignment_bytes * arena_alignment_bytes;
}

// An empty part takes no alignment: it sits at the end of the part before it.
ArenaPart part_after(const ArenaPart& before, std::uint64_t size_bytes) noexcept {
  const std::uint64_t end = before.offset_bytes + before.size_bytes;
  return ArenaPart{size_bytes == 0 ? end : align_up(end), size_bytes};
}

Error invalid(const char* setting, std::string message) {
  return make_error(ErrorCode::invalid_argument, setting, std::move(message));
}
Error refused(const char* setting, std::string message) {
  return make_error(ErrorCode::refused, setting, std::move(message));
}

std::uint32_t effective_tile_tokens(const MemorySettings& s) noexcept {
  if (s.tile_tokens != 0) return s.tile_tokens;
  return std::min(tile_tokens_default, s.max_context_tokens);
}

std::uint32_t floor_pages_per_layer(const MemorySettings& s) noexcept {
  const std::uint32_t pages_per_layer = s.max_context_tokens / s.page_tokens;
  return std::min(1 + pages_spanned_max(s.chunk_tokens, s.page_tokens), std::max(pages_per_layer, 1u));
}

// The device parts other than pages, and the bytes of `contexts` floors.
struct DeviceNeeds {
  std::uint64_t tiles_bytes = 0;
  std::uint64_t recurrent_bytes = 0;
  std::uint64_t floor_bytes = 0;  // one floor
  std::uint32_t floor_pages = 0;
};

DeviceNeeds device_needs(const MemorySettings& s, std::uint32_t contexts) noexcept {
  DeviceNeeds n;
  const std::uint64_t row = s.geometry.row_bytes();
  n.tiles_bytes = align_up(static_cast<std::uint64_t>(s.tiles) * effective_tile_tokens(s) * row);
  n.recurrent_bytes = align_up(static_cast<std::uint64_t>(contexts) * s.geometry.recurrent_state_bytes);
  n.floor_pages = floor_pages_per_layer(s) * s.geometry.dense_layers;
  n.floor_bytes = static_cast<std::uint64_t>(n.floor_pages) * s.page_tokens * row;
  return n;
}

// Histories the host pool holds when each also keeps its state checkpoints (state_plan.hpp); no
// bound (all of them) without recurrent state.
u128 histories_with_state(const MemorySettings& s, u128 history_bytes) noexcept {
  const std::uint64_t state = state_bytes_per_history(s);
  if (state == 0 || s.prefix_cache_bytes >= s.host_pool_bytes) return ~static_cast<u128>(0);
  return static_cast<u128>(s.host_pool_bytes - s.prefix_cache_bytes) / (history_bytes + state);
}

StatePlan plan_state(const MemorySettings& s, const HostPoolPlan& h) noexcept {
  StatePlan sp;
  if (s.geometry.recurrent_state_bytes == 0) return sp;
  sp.state_bytes = s.geometry.recurrent_state_bytes;
  sp.page_tokens = s.page_tokens;
  sp.checkpoint_pages = s.state_checkpoint_pages;
  sp.checkpoints = state_checkpoints(s);
  sp.bytes_per_history = state_bytes_per_history(s);
  sp.histories = h.history_slots;
  sp.offset = h.prefix_cache_offset + std::uint64_t{h.prefix_cache_pages} * h.prefix_cache_page_bytes +
              std::uint64_t{h.prefix_cache_states} * h.prefix_cache_state_bytes;
  sp.bytes = std::uint64_t{sp.histories} * sp.bytes_per_history;
  sp.device_slots = h.concurrency;
  sp.device_bytes = std::uint64_t{sp.device_slots} * sp.state_bytes;
  return sp;
}

// Sparse attention's page summaries for `histories` histories (zero when sparse is off).
SummaryPlan plan_summaries(const MemorySettings& s, std::uint32_t histories) noexcept {
  SummaryPlan sp;
  if (!s.sparse_summaries) return sp;
  sp.histories = histories;
  sp.pages_per_layer = s.max_context_tokens / s.page_tokens + 1;
  sp.page_bytes = 2ull * s.geometry.kv_heads * s.geometry.head_dim * 2u;  // 16-bit min and max
  sp.bytes = std::uint64_t{sp.histories} * s.geometry.dense_layers * sp.pages_per_layer * sp.page_bytes;
  return sp;
}

std::uint32_t host_concurrency(const MemorySettings& s) noexcept {
  const u128 segment = static_cast<u128>(s.max_context_tokens) * s.geometry.row_bytes();
  if (segment == 0 || s.geometry.dense_layers == 0) return 0;
  if (s.prefix_cache_bytes >= s.host_pool_bytes) return 0;
  u128 histories = static_cast<u128>(s.host_pool_bytes - s.prefix_cache_bytes) / segment / s.geometry.dense_layers;
  histories = std::min<u128>(histories, histories_with_state(s, static_cast<u128>(segment) * s.geometry.dense_layers));
  if (histories <= s.retained_histories) return 0;
  return static_cast<std::uint32_t>(std::min<u128>(histories - s.retained_histories, s.max_seqs));
}

// Every history the host pool maps: the running contexts and the retained-history allowance.
std::uint32_t host_history_slots(const MemorySettings& s) noexcept {
  const std::uint32_t concurrency = host_concurrency(s);
  return concurrency == 0 ? 0 : concurrency + s.retained_histories;
}

bool automatic_text(std::string_view text) {
  std::string lower;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return lower == "auto" || lower == "max" || lower == "all" || lower == "free" || (!lower.empty() && lower.back() == '%');
}

Error automatic_device_pool(const MemorySettings& s) {
  std::string how;
  if (s.geometry.validate().ok() && s.page_tokens != 0 && s.max_context_tokens >= s.page_tokens && s.chunk_tokens != 0) {
    const std::uint32_t contexts = std::max(1u, host_concurrency(s) == 0 ? s.max_seqs : host_concurrency(s));
    const DeviceNeeds n = device_needs(s, contexts);
    const std::uint64_t minimum = n.tiles_bytes + n.recurrent_bytes + static_cast<std::uint64_t>(contexts) * n.floor_bytes +
                                  align_up(s.headroom_bytes);
    how = fmt::format(
        " Choose one: staging tiles ({} × {} tokens × {} B = {}) + floors for {} contexts ({} × {} pages of {} = {}) + "
        "recurrent slots ({}) + headroom ({}) = at least {}; every byte above that keeps more history resident "
        "(less staging per step).",
        s.tiles, effective_tile_tokens(s), s.geometry.row_bytes(), format_bytes(n.tiles_bytes), contexts, contexts,
        n.floor_pages, format_bytes(static_cast<std::uint64_t>(s.page_tokens) * s.geometry.row_bytes()),
        format_bytes(static_cast<std::uint64_t>(contexts) * n.floor_bytes), format_bytes(n.recurrent_bytes),
        format_bytes(s.headroom_bytes), format_bytes(minimum));
  } else {
    how = " Choose an explicit size such as 8GiB.";
  }
  return refused("--device-pool",
                 "an automatic device pool size is refused: it would hide the decision you are making — how much "
                 "device memory KV may own, and so how many contexts run at once and how much history stays "
                 "resident instead of being copied in every step." +
                     how);
}

Status check_shape(const MemorySettings& s) {
  if (Status g = s.geometry.validate(); !g) return g;
  if (s.max_context_tokens == 0) return invalid("--max-context", "must be at least 1 token");
  if (s.page_tokens == 0) return invalid("--page-tokens", "must be at least 1 token (16 is a good start)");
  if (s.page_tokens > s.max_context_tokens) {
    return invalid("--page-tokens", fmt::format("{} is longer than --max-context {}: a page holds at most one context",
                                                s.page_tokens, s.max_context_tokens));
  }
  // The whole-page values next to `tokens`, in 64 bits: a suggestion past 2^32 - 1 is left out, never wrapped.
  auto whole_pages = [&](std::uint32_t tokens) {
    const std::uint64_t below = std::uint64_t{tokens} / s.page_tokens * s.page_tokens;
    const std::uint64_t above = below + s.page_tokens;
    if (below == 0 || above > UINT32_MAX) return fmt::format("{}", below == 0 ? above : below);
    return fmt::format("{} or {}", below, above);
  };
  if (s.max_context_tokens % s.page_tokens != 0) {
    return invalid("--max-context", fmt::format("{} is not a whole number of {}-token pages: use {}", s.max_context_tokens,
                                                s.page_tokens, whole_pages(s.max_context_tokens)));
  }
  const std::uint32_t tile = effective_tile_tokens(s);
  if (tile % s.page_tokens != 0) {
    return invalid("--tile-tokens", fmt::format("the page size ({} tokens) must divide the tile size ({} tokens): "
                                                "use --tile-tokens {}, or another --page-tokens",
                                                s.page_tokens, tile, whole_pages(tile)));
  }
  if (s.tiles == 0) {
    return invalid("--tiles", "must be at least 1: history that is not resident streams through the staging tiles "
                              "(2 lets one tile fill while the other is read)");
  }
  if (s.max_seqs == 0) return invalid("--max-seqs", "must be at least 1");
  if (s.chunk_tokens == 0) return invalid("--chunk-tokens", "must be at least 1 (1 for decode-only)");
  if (s.chunk_tokens > s.max_context_tokens) {
    return invalid("--chunk-tokens", fmt::format("{} is longer than --max-context {}", s.chunk_tokens, s.max_context_tokens));
  }
  return Status::success();
}

// The host prefix cache's part (docs/PREFIX.md): whole cache pages, carved off the host pool before
// the histories; refused when it holds no page or leaves no room for one history.
Status plan_prefix_cache(const MemorySettings& s, HostPoolPlan& h) {
  h.prefix_cache_bytes = s.prefix_cache_bytes;
  h.prefix_cache_page_bytes = std::uint64_t{s.page_tokens} * h.row_bytes * h.dense_layers;
  if (state_checkpoints(s) != 0) {
    // A hybrid's cached prefix is adoptable only up to a page boundary where the cache holds the
    // state too: half the cache's bytes keep state checkpoints, the pages get the rest.
    const std::uint64_t state = s.geometry.recurrent_state_bytes;
    const std::uint64_t states = s.prefix_cache_bytes / 2 / state;
    if (states == 0 || states > UINT32_MAX) {
      return refused("prefix_cache",
                     fmt::format("{} cannot give half its bytes to recurrent-state checkpoints of {} (a hybrid model's "
                                 "cached prefix is adoptable only up to a cached state): raise prefix_cache to at least "
                                 "{} or set it to 0 (no prefix cache)",
                                 format_bytes(s.prefix_cache_bytes), format_bytes(state),
                                 format_bytes(2 * std::max(state, h.prefix_cache_page_bytes))));
    }
    h.prefix_cache_states = static_cast<std::uint32_t>(states);
    h.prefix_cache_state_bytes = state;
  }
  const std::uint64_t pages =
      (s.prefix_cache_bytes - std::uint64_t{h.prefix_cache_states} * h.prefix_cache_state_bytes) / h.prefix_cache_page_bytes;
  if (pages == 0) {
    return refused("prefix_cache",
                   fmt::format("{} holds no cache page of {} (page_tokens {} × row_bytes {} × dense_layers {}): raise "
                               "prefix_cache to at least {} or set it to 0 (no prefix cache)",
                               format_bytes(s.prefix_cache_bytes), format_bytes(h.prefix_cache_page_bytes), s.page_tokens,
                               h.row_bytes, h.dense_layers, format_bytes(h.prefix_cache_page_bytes)));
  }
  if (pages > UINT32_MAX) return refused("prefix_cache", "more than 2^32 cache pages: lower prefix_cache");
  h.prefix_cache_pages = static_cast<std::uint32_t>(pages);
  const u128 need = static_cast<u128>(s.prefix_cache_bytes) + h.history_bytes;
  if (need > s.host_pool_bytes) {
    const std::uint64_t most = s.host_pool_bytes > h.history_bytes ? s.host_pool_bytes - h.history_bytes : 0;
    return refused("prefix_cache",
                   fmt::format("the host pool {} cannot hold the prefix cache {} and one history of {}: raise --host-pool "
                               "to at least {} or lower prefix_cache to at most {}",
                               format_bytes(s.host_pool_bytes), format_bytes(s.prefix_cache_bytes),
                               format_bytes(h.history_bytes), format_bytes(static_cast<std::uint64_t>(need)),
                               format_bytes(most)));
  }
  return Status::success();
}

Result<HostPoolPlan> plan_host_pool(const MemorySettings& s) {
  HostPoolPlan h;
  h.row_bytes = s.geometry.row_bytes();
  h.max_context_tokens = s.max_context_tokens;
  h.dense_layers = s.geometry.dense_layers;
  h.host_pool_bytes = s.host_pool_bytes;
  h.max_seqs = s.max_seqs;
  const u128 segment = static_cast<u128>(s.max_context_tokens) * h.row_bytes;
  const u128 history = segment * h.dense_layers;
  if (history > u64_max) {
    return invalid("--max-context", "max context × row bytes × dense layers overflows 64 bits: lower --max-context");
  }
  h.segment_bytes = static_cast<std::uint64_t>(segment);
  h.history_bytes = static_cast<std::uint64_t>(history);
  h.window_layers = s.geometry.window_layers();
  if (h.window_layers != 0) {
    // Window layers keep a ring, not a segment (window_plan.hpp): the same figure the plan prints.
    h.kinds = s.geometry.kinds;
    const std::uint64_t P = s.page_tokens;
    const std::uint64_t window_pages = (std::uint64_t{s.geometry.kinds.window_tokens} + P - 1) / P;
    h.ring_tokens = static_cast<std::uint32_t>(std::min<std::uint64_t>(s.max_context_tokens, (window_pages + 1) * P));
    h.ring_bytes = std::uint64_t{h.ring_tokens} * h.row_bytes;
    h.history_bytes = (h.dense_layers - h.window_layers) * h.segment_bytes + std::uint64_t{h.window_layers} * h.ring_bytes;
    if (s.chunk_tokens > h.ring_tokens) {
      return invalid("--chunk-tokens",
                     fmt::format("{} is longer than the window layers' host ring of {} tokens (window {} + a page of {}): "
                                 "one step's new rows would overwrite each other; lower --chunk-tokens to at most {}",
                                 s.chunk_tokens, h.ring_tokens, s.geometry.kinds.window_tokens, s.page_tokens, h.ring_tokens));
    }
  }
  if (s.host_pool_bytes == 0) {
    return invalid("--host-pool", fmt::format("must be given explicitly: one history needs {} ({} segments of {})",
                                              format_bytes(h.history_bytes), h.dense_layers, format_bytes(h.segment_bytes)));
  }
  if (s.prefix_cache_bytes > 0) {
    if (Status st = plan_prefix_cache(s, h); !st.ok()) return st.error();
  }
  h.segments = (h.host_pool_bytes - h.prefix_cache_bytes) / h.segment_bytes;
  h.histories = h.window_layers == 0 ? h.segments / h.dense_layers : (h.host_pool_bytes - h.prefix_cache_bytes) / h.history_bytes;
  h.histories = std::min<std::uint64_t>(h.histories, static_cast<std::uint64_t>(histories_with_state(s, h.history_bytes)));
  h.leftover_segments = h.window_layers == 0 ? h.segments - h.histories * h.dense_layers
                                             : (h.host_pool_bytes - h.prefix_cache_bytes - h.histories * h.history_bytes) /
                                                   h.segment_bytes;
  if (h.histories == 0 && state_bytes_per_history(s) != 0 && h.segments >= h.dense_layers) {
    return refused("--host-pool",
                   fmt::format("host pool must be at least {} for one history: its {} segments of {} and its {} recurrent-"
                               "state checkpoints of {} (state_plan.hpp); raise --host-pool, or lower "
                               "--state-checkpoint-pages",
                               format_bytes(h.history_bytes + state_bytes_per_history(s)), h.dense_layers,
                               format_bytes(h.segment_bytes), state_checkpoints(s), format_bytes(s.geometry.recurrent_state_bytes)));
  }
  if (h.histories == 0 && h.window_layers != 0) {
    return refused("--host-pool",
                   fmt::format("host pool must be at least {} (full layers {} × segment {} + window layers {} × ring {}) for "
                               "max context {}; {} holds no history: raise --host-pool or lower --max-context",
                               format_bytes(h.history_bytes), h.dense_layers - h.window_layers, format_bytes(h.segment_bytes),
                               h.window_layers, format_bytes(h.ring_bytes), s.max_context_tokens,
                               format_bytes(h.host_pool_bytes)));
  }
  if (h.histories == 0) {
    const std::uint64_t fit_tokens = h.host_pool_bytes / (static_cast<std::uint64_t>(h.dense_layers) * h.row_bytes);
    const std::uint64_t fit_pages = fit_tokens / s.page_tokens * s.page_tokens;
    std::string lower = fit_pages == 0
                            ? fmt::format(" (even one {}-token page per layer needs {})", s.page_tokens,
                                          format_bytes(static_cast<std::uint64_t>(s.page_tokens) * h.row_bytes * h.dense_layers))
                            : fmt::format(", or lower --max-context to {}", fit_pages);
    return refused("--host-pool",
                   fmt::format("host pool must be at least {} ({} segments of {}) for max context {}{}; {} holds no history",
                               format_bytes(h.history_bytes), h.dense_layers, format_bytes(h.segment_bytes),
                               s.max_context_tokens, lower, format_bytes(h.host_pool_bytes)));
  }
  h.retained_histories = s.retained_histories;
  if (h.histories <= h.retained_histories) {
    const std::uint64_t need = (static_cast<std::uint64_t>(h.retained_histories) + 1) * h.history_bytes;
    return refused("retained_histories",
                   fmt::format("histories {} = floor(host pool {} / {} per history) must be ≥ concurrency (at least 1) + "
                               "retained_histories {}: raise --host-pool to at least {} or lower retained_histories",
                               h.histories, format_bytes(h.host_pool_bytes), format_bytes(h.history_bytes),
                               h.retained_histories, format_bytes(need)));
  }
  h.concurrency = static_cast<std::uint32_t>(std::min<std::uint64_t>(h.histories - h.retained_histories, s.max_seqs));
  h.history_slots = h.concurrency + h.retained_histories;
  h.prefix_cache_offset = static_cast<std::uint64_t>(h.history_slots) * h.history_bytes;
  h.used_bytes = h.prefix_cache_offset + std::uint64_t{h.prefix_cache_pages} * h.prefix_cache_page_bytes +
                 std::uint64_t{h.prefix_cache_states} * h.prefix_cache_state_bytes +
                 std::uint64_t{h.history_slots} * state_bytes_per_history(s);
  return h;
}

Result<ArenaPlan> plan_arena(const MemorySettings& s, const HostPoolPlan& h, std::uint64_t summary_bytes) {
  ArenaPlan a;
  a.device_pool_bytes = s.device_pool_bytes;
  if (s.device_pool_bytes == 0) return automatic_device_pool(s);
  // The headroom is part of the device pool: checked before it is aligned (align_up would wrap near 2^64).
  if (s.headroom_bytes > s.device_pool_bytes) {
    return refused("--headroom", fmt::format("{} is larger than the device pool ({}): the headroom is part of it",
                                             format_bytes(s.headroom_bytes), format_bytes(s.device_pool_bytes)));
  }
  const std::uint64_t row = h.row_bytes;
  a.page_tokens = s.page_tokens;
  a.page_bytes = static_cast<std::uint64_t>(s.page_tokens) * row;
  a.tile_tokens = effective_tile_tokens(s);
  a.tile_bytes = static_cast<std::uint64_t>(a.tile_tokens) * row;
  a.tile_pages = a.tile_tokens / a.page_tokens;
  a.tiles = s.tiles;
  a.recurrent_slots = s.geometry.recurrent_state_bytes != 0 ? h.concurrency : 0;
  a.recurrent_slot_bytes = s.geometry.recurrent_state_bytes;

  const u128 tiles_bytes = static_cast<u128>(a.tiles) * a.tile_bytes;
  const u128 recurrent_bytes = static_cast<u128>(a.recurrent_slots) * a.recurrent_slot_bytes;
  if (tiles_bytes > u64_max / 4) return invalid("--tiles", "tiles × tile bytes overflows: lower --tiles or --tile-tokens");
  if (recurrent_bytes > u64_max / 4) return invalid("--recurrent-state-bytes", "recurrent slots overflow: lower it");
  const DeviceNeeds needs = device_needs(s, 1);
  const std::uint64_t fixed = align_up(static_cast<std::uint64_t>(tiles_bytes)) +
                              align_up(static_cast<std::uint64_t>(recurrent_bytes)) + align_up(summary_bytes) +
                              align_up(s.headroom_bytes);
  const std::uint64_t minimum = fixed + align_up(needs.floor_bytes);
  auto too_small = [&] {
    return refused("--device-pool",
                   fmt::format("device pool must be at least {} to run one context: staging tiles {} ({} × {} tokens) "
                               "+ recurrent slots {} ({} × {}) + {}headroom {} + one floor {} ({} pages of {}); "
                               "raise --device-pool, or lower --tiles, --tile-tokens, --chunk-tokens or --headroom",
                               format_bytes(minimum), format_bytes(static_cast<std::uint64_t>(tiles_bytes)), a.tiles,
                               a.tile_tokens, format_bytes(static_cast<std::uint64_t>(recurrent_bytes)),
                               a.recurrent_slots, format_bytes(a.recurrent_slot_bytes),
                               summary_bytes == 0 ? std::string() : fmt::format("page summaries {} + ", format_bytes(summary_bytes)),
                               format_bytes(s.headroom_bytes), format_bytes(needs.floor_bytes), needs.floor_pages,
                               format_bytes(a.page_bytes)));
  };
  if (s.device_pool_bytes < fixed) return too_small();
  // Start from the count that ignores alignment (an upper bound) and step down to the first that fits.
  const std::uint64_t unaligned = align_up(static_cast<std::uint64_t>(tiles_bytes)) +
                                  static_cast<std::uint64_t>(recurrent_bytes) + summary_bytes + s.headroom_bytes;
  std::uint64_t pages = s.device_pool_bytes > unaligned ? (s.device_pool_bytes - unaligned) / a.page_bytes : 0;
  // Lay out; alignment of the page pool's end may cost a page or a few small ones.
  for (;;) {
    a.staging_tiles = {0, static_cast<std::uint64_t>(tiles_bytes)};
    a.page_pool = {align_up(a.staging_tiles.size_bytes), pages * a.page_bytes};
    a.recurrent = part_after(a.page_pool, static_cast<std::uint64_t>(recurrent_bytes));
    a.summaries = part_after(a.recurrent, summary_bytes);
    a.headroom = part_after(a.summaries, s.headroom_bytes);
    a.used_bytes = a.headroom.offset_bytes + a.headroom.size_bytes;
    if (a.used_bytes <= s.device_pool_bytes || pages == 0) break;
    --pages;
  }
  if (a.used_bytes > s.device_pool_bytes || pages < needs.floor_pages) return too_small();
  if (pages >= page_none) {
    return invalid("--page-tokens", fmt::format("the device pool would hold {} pages, more than a page table can name: "
                                                "raise --page-tokens", pages));
  }
  a.pages = static_cast<std::uint32_t>(pages);
  a.unused_bytes = s.device_pool_bytes - a.used_bytes;
  return a;
}

Result<BudgetPlan> plan_budget(const MemorySettings& s, const HostPoolPlan& h, const ArenaPlan& a) {
  BudgetPlan b;
  const std::uint32_t layers = s.geometry.dense_layers;
  b.pages_per_layer_max = s.max_context_tokens / s.page_tokens;
  b.floor_pages_per_layer = floor_pages_per_layer(s);
  b.floor_pages_min = static_cast<std::uint64_t>(b.floor_pages_per_layer) * layers;
  const std::uint64_t usable_max = static_cast<std::uint64_t>(b.pages_per_layer_max) * layers;

  b.floor_pages = s.floor_pages != 0 ? s.floor_pages : b.floor_pages_min;
  if (b.floor_pages < b.floor_pages_min) {
    return invalid("--floor-pages", fmt::format("{} is below the minimum floor of {} pages: {} dense layers × (1 sink "
                                                "page + {} tail pages for a {}-token step)",
                                                b.floor_pages, b.floor_pages_min, layers, b.floor_pages_per_layer - 1,
                                                s.chunk_tokens));
  }
  if (b.floor_pages > a.pages) {
    return refused("--floor-pages", fmt::format("a floor of {} pages does not fit the pool's {} pages: lower "
                                                "--floor-pages or raise --device-pool", b.floor_pages, a.pages));
  }
  b.burst_pages = s.burst_pages != 0 ? s.burst_pages : std::max(b.floor_pages, std::min<std::uint64_t>(a.pages, usable_max));
  const std::uint64_t share = a.pages / std::max(1u, h.concurrency) / layers * layers;
  b.target_pages = s.target_pages != 0 ? s.target_pages : std::clamp(share, b.floor_pages, std::max(b.floor_pages, b.burst_pages));
  if (b.floor_pages > b.target_pages) {
    return invalid("--target-pages", fmt::format("the target ({} pages) is below the floor ({} pages): floor ≤ target ≤ "
                                                 "burst; raise --target-pages or lower --floor-pages",
                                                 b.target_pages, b.floor_pages));
  }
  if (b.target_pages > b.burst_pages) {
    return invalid("--burst-pages", fmt::format("the burst ({} pages) is below the target ({} pages): floor ≤ target ≤ "
                                                "burst; raise --burst-pages or lower --target-pages",
                                                b.burst_pages, b.target_pages));
  }
  if (b.burst_pages > a.pages) {
    return invalid("--burst-pages", fmt::format("the burst ({} pages) is larger than the whole pool ({} pages)",
                                                b.burst_pages, a.pages));
  }
  const std::uint64_t per_layer = (b.burst_pages + layers - 1) / layers;
  b.layer_pages_max = static_cast<std::uint32_t>(std::min<std::uint64_t>(b.pages_per_layer_max, per_layer));
  b.layer_pages_max = std::max(b.layer_pages_max, b.floor_pages_per_layer);
  b.floors_that_fit = a.pages / b.floor_pages;
  b.concurrency = static_cast<std::uint32_t>(std::min<std::uint64_t>(h.concurrency, b.floors_that_fit));
  return b;
}

}  // namespace

std::uint32_t pages_spanned_max(std::uint32_t tokens, std::uint32_t page_tokens) noexcept {
  if (tokens == 0 || page_tokens == 0) return 0;
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(tokens) - 1 + page_tokens - 1) / page_tokens + 1);
}

std::uint64_t device_pool_minimum_bytes(const MemorySettings& s, std::uint32_t contexts) {
  if (!check_shape(s)) return 0;
  const DeviceNeeds n = device_needs(s, contexts);
  return n.tiles_bytes + n.recurrent_bytes + static_cast<std::uint64_t>(std::max(contexts, 1u)) * n.floor_bytes +
         align_up(plan_summaries(s, host_history_slots(s)).bytes) + align_up(s.headroom_bytes);
}

std::uint64_t summary_part_bytes(const MemorySettings& s) noexcept {
  if (!check_shape(s)) return 0;
  return align_up(plan_summaries(s, host_history_slots(s)).bytes);
}

Result<std::uint64_t> parse_device_pool(std::string_view text, const MemorySettings& settings) {
  if (automatic_text(text)) return automatic_device_pool(settings);
  Result<std::uint64_t> bytes = parse_size(text, "--device-pool", /*zero_allowed=*/true);
  if (!bytes) return bytes;
  if (*bytes == 0) return automatic_device_pool(settings);
  return bytes;
}

Result<MemoryPlan> make_memory_plan(const MemorySettings& s) {
  if (Status shape = check_shape(s); !shape) return shape.error();
  MemoryPlan plan;
  plan.geometry = s.geometry;
  plan.chunk_tokens = s.chunk_tokens;
  plan.promoted_pages_per_layer = s.promoted_pages_per_layer;
  plan.queue_max = s.queue_max;
  Result<HostPoolPlan> host = plan_host_pool(s);
  if (!host) return host.error();
  plan.host = *host;
  plan.summaries = plan_summaries(s, plan.host.history_slots);
  plan.state = plan_state(s, plan.host);
  Result<ArenaPlan> arena = plan_arena(s, plan.host, plan.summaries.bytes);
  if (!arena) return arena.error();
  plan.arena = *arena;
  Result<BudgetPlan> budget = plan_budget(s, plan.host, plan.arena);
  if (!budget) return budget.error();
  plan.budget = *budget;
  return plan;
}

}  // namespace activekv
