// core_instance.cpp — building the core from a scenario, and reading its plans as costs.
#include "sim/core_instance.hpp"

#include <limits>

namespace activekv::sim {

namespace {

constexpr std::uint32_t log_capacity = 4096;  // decisions kept for explain(); the ring overwrites

}  // namespace

MemorySettings memory_settings(const Scenario& scenario, Variant variant) {
  MemorySettings s;
  s.geometry = scenario.geometry;
  s.host_pool_bytes = scenario.host_pool_bytes;
  s.device_pool_bytes = scenario.arena_bytes(variant);
  s.headroom_bytes = variant == Variant::activekv_headroom ? scenario.headroom_bytes : 0;
  s.page_tokens = scenario.page_tokens;
  s.tile_tokens = scenario.tile_tokens;
  s.tiles = scenario.tiles;
  s.max_context_tokens = scenario.max_context_tokens;
  s.max_seqs = scenario.max_seqs;
  s.chunk_tokens = scenario.chunk_tokens;
  return s;
}

CoreInstance::CoreInstance(const MemoryPlan& plan, std::uint32_t log_entries)
    : plan_(plan), arena_(plan_.arena), log_(log_entries), budgets_(plan_, arena_, log_), planner_(budgets_, policy_) {
  // The simulated device "allocates" the arena once, as a backend would at warm-up.
  arena_.bind_allocation(plan_.arena.used_bytes);
}

Result<std::unique_ptr<CoreInstance>> CoreInstance::create(const Scenario& scenario, Variant variant) {
  AK_ASSERT(variant != Variant::stock, "stock runs without the ActiveKV core");
  Result<MemoryPlan> plan = make_memory_plan(memory_settings(scenario, variant));
  if (!plan) return plan.error();
  std::unique_ptr<CoreInstance> core(new CoreInstance(plan.value(), log_capacity));
  const ArenaPlan& arena = core->plan_.arena;
  if (variant == Variant::activekv_headroom) {
    Result<Headroom> headroom = Headroom::create(arena.headroom.offset_bytes, arena.headroom.size_bytes, arena.page_bytes);
    if (!headroom) return headroom.error();
    core->headroom_.emplace(std::move(headroom.value()));
    const RetainedConfig config{core->budgets_.slots(), core->plan_.geometry.dense_layers, arena.page_tokens,
                                core->plan_.budget.pages_per_layer_max, 0};
    Result<RetainedHistory> retained = RetainedHistory::create(config, *core->headroom_);
    if (!retained) return retained.error();
    core->retained_.emplace(std::move(retained.value()));
  }
  // One split never yields more runs than pages in a tile.
  core->runs_.assign(arena.tile_pages + 1, StagedRun{});
  return core;
}

StepShape CoreInstance::shape(std::uint32_t contexts) const noexcept {
  return StepShape{contexts, plan_.geometry.dense_layers, plan_.arena.tile_tokens, plan_.host.row_bytes};
}

TranslateCounters CoreInstance::translate(std::span<LayerWork> work) noexcept {
  const StepPlan& step = planner_.plan();
  const auto entries = static_cast<std::uint32_t>(step.scheduled.size());
  const std::uint32_t layers = plan_.geometry.dense_layers;
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint64_t row = plan_.host.row_bytes;
  AK_ASSERT(work.size() == static_cast<std::size_t>(entries) * layers, "work table must match the plan");
  AK_ASSERT(step.layers.size() == work.size(), "the plan has one layer plan per context and dense layer");
  TranslateCounters counters;
  for (LayerWork& w : work) w = LayerWork{};
  for (const LayerPlan& lp : step.layers) {
    LayerWork& w = work[static_cast<std::size_t>(lp.layer) * entries + lp.entry];
    std::uint64_t staged_pages = 0;
    for (std::uint32_t i = lp.copy_first; i < lp.copy_first + lp.copy_count; ++i) {
      const StageCopy& copy = step.copies[i];
      staged_pages += copy.pages;
      if (!retained_) {
        ++w.h2d_copies;
        w.h2d_bytes += copy.bytes;
        continue;
      }
      const std::uint32_t begin = copy.logical_first * P;
      const std::uint32_t end = (copy.logical_first + copy.pages) * P;
      const SplitCounts split = retained_->split(lp.slot, lp.layer, begin, end, runs_);
      AK_ASSERT(split.runs == split.runs_needed, "split scratch holds every run of one tile copy");
      w.h2d_copies += split.host_runs;
      w.h2d_bytes += split.host_tokens * row;
      // Retained pages scattered in headroom are gathered by one batched d2d command per staged
      // copy (a copy kernel over a page list), not one command per page.
      w.d2d_copies += split.retained_runs > 0 ? 1 : 0;
      w.d2d_bytes += split.retained_tokens * row;
      counters.retained_bytes += split.retained_tokens * row;
      // Keep what just crossed the link, while headroom has room: one batched d2d per staged copy.
      bool captured_any = false;
      for (std::uint32_t r = 0; r < split.runs && retained_->headroom().pages_free() > 0; ++r) {
        if (runs_[r].retained) continue;
        for (std::uint32_t logical = runs_[r].token_begin / P; logical < runs_[r].token_end / P; ++logical) {
          if (retained_->capture(lp.slot, lp.layer, logical, lp.length_tokens) == std::numeric_limits<std::uint64_t>::max()) {
            continue;
          }
          ++counters.pages_captured;
          w.capture_bytes += P * row;
          captured_any = true;
          if (retained_->headroom().pages_free() == 0) break;
        }
      }
      if (captured_any) ++w.capture_copies;
    }
    counters.host_bytes += w.h2d_bytes;  // with or without retention: what crossed the host link
    const std::uint64_t staged_tokens = staged_pages * P;
    AK_ASSERT(staged_tokens <= lp.length_tokens, "a layer stages no more tokens than it holds");
    w.staged_tokens = staged_tokens;
    w.resident_bytes = (lp.length_tokens - staged_tokens) * row;
    // Promotions (tile page → pool page) ride in the same batched d2d as captures.
    if (lp.promotion_count > 0) {
      w.capture_bytes += static_cast<std::uint64_t>(lp.promotion_count) * plan_.arena.page_bytes;
      if (w.capture_copies == 0) w.capture_copies = 1;
    }
    for (std::uint32_t i = 0; i < step.write_back_count(lp); ++i) {
      w.writeback_bytes += step.write_back(lp, i).bytes;
      ++w.writeback_copies;
    }
  }
  return counters;
}

}  // namespace activekv::sim
