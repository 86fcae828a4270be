// planner.hpp — the residency plan for one step, as plain data.
//
// Given the contexts scheduled this step (each appends 1 token for decode or a chunk
// for prefill), plan_step() decides, for every context and dense layer:
//   - the page table: the sink page, the newest run (ring view into the budget
//     manager's tables) and the promoted pages — which logical page is in which pool page;
//   - the staging copies: every non-resident page, as contiguous host ranges packed
//     into tile slots (adjacent pages coalesce into one copy; a range that fits in one
//     tile is never split across two — it starts a fresh tile), in passes: a pass fills
//     at most `tiles` tiles, and the runtime runs copy → attend → release per pass.
//     A pass never mixes dense layers (layer l+1's queries exist only after layer l);
//   - the promotions the policy chose: tile page → pool page, device to device;
//   - the tail rows to write back: the step's new rows, held in the run's newest pages
//     (StepPlan::write_back() gives each region's device page, rows and host offset);
//   - the counters: bytes staged / promoted / written back, pages resident / staged.
// LayerPlans are ordered layer-major (all contexts' layer 0, then layer 1, ...), the
// order a forward pass consumes them.
//
// Cost: the page table is not copied into the plan; the plan refers to the budget
// manager's incrementally kept runs by offset, and the write-back regions are derived
// from each layer plan when read. A step's work is O(contexts × layers + copies +
// changes), independent of history length when the tiles are large: one 64-byte layer
// plan per context and layer, one copy per staged range, one slide per page boundary.
// All storage is reserved in the constructor: plan_step() allocates nothing (invariant 7).
//
// Promotion targets are pool pages in the `staging` state until step_completed() says
// the step's copies signalled; a failed fence quarantines them (PagePool::quarantine_page)
// before step_completed() is called.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "activekv/budget.hpp"
#include "activekv/policy.hpp"

namespace activekv {

struct ScheduledContext {
  ContextHandle context;
  std::uint32_t tokens_appended = 0;  // 1 for decode, up to chunk_tokens for prefill
};

// One contiguous host range → one place in one tile.
struct StageCopy {
  std::uint32_t slot = 0;           // context slot (= host history)
  std::uint32_t layer = 0;
  std::uint32_t logical_first = 0;  // first logical page copied
  std::uint32_t pages = 0;
  std::uint64_t host_offset = 0;    // byte offset in the host pool
  std::uint64_t bytes = 0;          // pages × page_bytes
  std::uint32_t tile_slot = 0;
  std::uint32_t tile_page = 0;      // first page position inside the tile
  std::uint64_t device_offset = 0;  // arena byte offset: tile_offset(tile_slot) + tile_page × page_bytes
  std::uint32_t pass = 0;
};

struct StagePass {
  std::uint32_t layer = 0;
  std::uint32_t copy_first = 0;  // into StepPlan::copies
  std::uint32_t copy_count = 0;
  std::uint32_t tiles_used = 0;
};

struct Promotion {
  std::uint32_t slot = 0;
  std::uint32_t layer = 0;
  std::uint32_t logical = 0;
  PageId pool_page;                 // target, in the staging state until step_completed()
  std::uint64_t device_offset_from = 0;  // the tile page holding it this step
  std::uint64_t device_offset_to = 0;    // the pool page
  std::uint32_t pass = 0;           // after this pass's copy signalled
  Reason reason = Reason::extend_run;
};

// One region of a layer plan's tail rows to write back: new rows of one logical page, from the
// resident pool page holding them to their place in the host history.
struct WriteBack {
  std::uint32_t slot = 0;
  std::uint32_t layer = 0;
  std::uint32_t logical = 0;
  std::uint32_t pool_page = 0;
  std::uint32_t row_first = 0;      // first row inside the page
  std::uint32_t rows = 0;
  std::uint64_t device_offset = 0;  // arena byte offset of the first row
  std::uint64_t host_offset = 0;    // host pool byte offset of the first row
  std::uint64_t bytes = 0;
};

// One context, one dense layer, this step: one 64-byte line (a step writes thousands).
struct alignas(64) LayerPlan {
  std::uint32_t slot = 0;
  std::uint32_t layer = 0;
  std::uint32_t entry = 0;          // index into the scheduled contexts
  std::uint32_t length_before = 0;  // tokens before this step
  std::uint32_t length_tokens = 0;  // tokens after this step (attention covers [0, length_tokens))
  std::uint32_t sink_page = page_none;
  std::uint32_t run_first = 0;      // newest run: logical [run_first, run_first + run_count)
  std::uint32_t run_count = 0;
  std::uint32_t ring_head = 0;      // ring index of run_first's pool page (StepPlan::run_page)
  std::uint32_t promoted_offset = 0;  // into StepPlan::promoted_*_storage (a snapshot taken for this step)
  std::uint32_t promoted_count = 0;
  std::uint32_t copy_first = 0, copy_count = 0;
  std::uint32_t promotion_first = 0, promotion_count = 0;
  std::uint32_t pages_staged = 0;
  // Pages resident when the plan was made (the sink, the run and the promoted pages).
  std::uint32_t pages_resident() const noexcept {
    return (sink_page != page_none ? 1u : 0u) + run_count + promoted_count;
  }
};
static_assert(sizeof(LayerPlan) == 64, "a layer plan is one cache line");

struct StepCounters {
  std::uint64_t bytes_staged = 0;
  std::uint64_t bytes_promoted = 0;
  std::uint64_t bytes_written_back = 0;
  std::uint64_t pages_resident = 0;
  std::uint64_t pages_staged = 0;
  std::uint64_t copies = 0;
  std::uint64_t passes = 0;
  std::uint64_t promotions = 0;
  std::uint64_t pages_evicted = 0;
};

// Where a logical page's bytes are during a step.
struct PageLocation {
  enum class Kind : std::uint8_t { pool, tile, absent } kind = Kind::absent;
  std::uint32_t pool_page = page_none;  // kind == pool
  std::uint32_t tile_slot = 0;          // kind == tile
  std::uint32_t tile_page = 0;
  std::uint32_t pass = 0;
  std::uint64_t device_offset = 0;      // arena byte offset of the page
};

struct StepPlan {
  std::uint64_t step = 0;
  std::span<const ScheduledContext> scheduled;
  std::span<const LayerPlan> layers;       // layer-major
  std::span<const StageCopy> copies;       // grouped by pass
  std::span<const StagePass> passes;
  std::span<const Promotion> promotions;
  StepCounters counters;
  std::span<const std::uint32_t> ring_storage;
  std::uint32_t ring_capacity = 0;
  std::uint32_t dense_layers = 0;  // ring_storage holds slot × dense_layers rings
  std::span<const std::uint32_t> promoted_logical_storage;
  std::span<const std::uint32_t> promoted_page_storage;
  std::uint64_t page_bytes = 0;
  std::uint64_t page_pool_offset = 0;
  std::uint32_t page_tokens = 0;
  const HostPoolPlan* host = nullptr;  // where each history's rows live

  std::uint32_t run_page(const LayerPlan& layer, std::uint32_t i) const noexcept {
    const std::uint32_t at = layer.ring_head + i;  // ring_head < ring_capacity and i < run_count ≤ ring_capacity
    const std::size_t ring = (static_cast<std::size_t>(layer.slot) * dense_layers + layer.layer) * ring_capacity;
    return ring_storage[ring + (at >= ring_capacity ? at - ring_capacity : at)];
  }
  // The tail rows to write back: the step's new rows [length_before, length_tokens) of a layer
  // plan, one region per logical page they touch, each held by the run's newest pages (or the
  // sink). They follow from the layer plan and its page table, so they are derived when read rather
  // than stored: a decode step has one per context and layer, and storing them cost as much as
  // the rest of the plan. i < write_back_count(layer).
  std::uint32_t write_back_count(const LayerPlan& layer) const noexcept {
    return (layer.length_tokens - 1) / page_tokens - layer.length_before / page_tokens + 1;
  }
  WriteBack write_back(const LayerPlan& layer, std::uint32_t i) const noexcept;
  // Where logical page `logical` of this layer plan is this step (O(log) in copies/promoted).
  PageLocation locate(const LayerPlan& layer, std::uint32_t logical) const noexcept;
};

enum class PlanOutcome : std::uint8_t {
  planned,
  too_many_contexts,   // more than the slots in one step
  chunk_too_large,     // tokens_appended > chunk_tokens (or 0)
  beyond_tokens_max,   // the context would exceed its tokens_max (≤ --max-context)
  duplicate_context,   // a context scheduled twice in one step
  no_staging_tiles,    // every staging tile was retired (quarantined): nothing can be staged
};
const char* plan_outcome_text(PlanOutcome outcome) noexcept;

class ResidencyPlanner {
 public:
  // promotions_per_layer_step: most pages one context's layer promotes in one step.
  ResidencyPlanner(BudgetManager& budgets, ResidencyPolicy& policy, std::uint32_t promotions_per_layer_step = 8);

  // Plans the step. A stale context handle is a programming error (asserted); the other
  // refusals are returned and leave every table as it was.
  PlanOutcome plan_step(std::span<const ScheduledContext> scheduled) noexcept;
  const StepPlan& plan() const noexcept { return plan_; }
  // The step's fences signalled: promotion targets land (staging → owned).
  void step_completed() noexcept;
  // Takes a staging tile out of rotation for good: a fence that touched it failed, so its lease
  // is quarantined (invariant 4) and no later plan may place a copy there. Later passes use the
  // remaining tiles (more passes, each with fewer tiles). With none left, plan_step() refuses
  // every step (no_staging_tiles). Call between steps; returns false when it was already retired.
  bool retire_tile(std::uint32_t tile_slot) noexcept;
  std::uint32_t tiles_usable() const noexcept { return tiles_usable_; }
  std::uint64_t step() const noexcept { return step_; }
  ResidencyPolicy& policy() noexcept { return policy_; }

 private:
  // Per-step totals, kept in plan_step's frame and stored into plan_.counters once.
  struct StepSums {
    std::uint64_t pages_resident = 0, pages_staged = 0, rows_written_back = 0;
  };
  void plan_layer(std::uint32_t entry, std::uint32_t layer, StepSums& sums) noexcept;
  void place_tail_pages(std::uint32_t entry, std::uint32_t layer) noexcept;
  std::uint32_t stage_history(const LayerPlan& lp) noexcept;  // returns pages staged
  std::uint32_t promote(std::uint32_t slot, std::uint32_t layer, std::uint32_t sink_page, std::uint32_t copy_first,
                        std::uint32_t copy_count) noexcept;  // returns promotions emitted
  void stage_range(std::uint32_t slot, std::uint32_t layer, std::uint32_t first, std::uint32_t count) noexcept;
  void open_pass(std::uint32_t layer) noexcept;

  BudgetManager& budgets_;
  ResidencyPolicy& policy_;
  const MemoryPlan& mp_;
  std::uint64_t step_ = 0;
  bool step_open_ = false;
  StepPlan plan_;
  std::vector<ScheduledContext> scheduled_;
  std::vector<LayerPlan> layers_;
  std::vector<StageCopy> copies_;
  std::vector<StagePass> passes_;
  std::vector<Promotion> promotions_;
  std::vector<PageRange> ranges_;        // scratch: one layer's staged ranges
  std::vector<std::uint32_t> chosen_;    // scratch: the policy's choices
  std::vector<std::uint8_t> seen_;       // scratch: slot scheduled this step
  std::vector<std::uint32_t> length_before_;  // per entry
  std::vector<std::uint8_t> may_grow_;        // per entry: the context can take a page this step
  std::vector<std::uint32_t> tail_last_;      // per entry: the last logical page the step writes
  std::vector<std::uint32_t> tail_first_;     // per entry: the first logical page the step writes
  struct Placement {
    std::uint32_t entry = 0, layer = 0;
  };
  std::vector<Placement> placements_;         // scratch: the tail placements of phase 1, in order
  std::vector<std::uint32_t> promoted_logical_snapshot_;  // the promoted sets as attention sees them this step
  std::vector<std::uint32_t> promoted_page_snapshot_;
  std::uint32_t promoted_snapshot_count_ = 0;
  std::uint32_t layer_count_ = 0, copy_count_ = 0, pass_count_ = 0, promotion_count_ = 0;
  std::vector<std::uint32_t> tile_order_;  // the tile slots in rotation, ascending; [0, tiles_usable_)
  std::uint32_t tiles_usable_ = 0;
  std::uint32_t tile_cursor_rank_ = 0, tile_cursor_page_ = 0;  // next free tile page in the open pass (rank in tile_order_)
  std::uint32_t promotions_per_layer_max_ = 0;
};

}  // namespace activekv
