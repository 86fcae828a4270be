// planner.cpp — one step's residency plan (see planner.hpp).
//
// Three phases, so that no context's page table changes after its snapshot is taken:
//   1. tail pages: every scheduled context and layer gets pool pages for the tokens it
//      appends (from its reservation, its target, its burst, or by sliding its own run);
//      this is the only phase that may reclaim pages from other contexts;
//   2. per layer, per context (layer-major): snapshot the page table (the write-backs of the
//      new rows follow from it: StepPlan::write_back) and stage every non-resident page into
//      the tiles in rotation (retire_tile takes a quarantined one out);
//   3. right after each snapshot, promotions: the policy picks staged pages to keep;
//      they take free or reserved pages only (never another context's), and extend the
//      run below the snapshot's range or join the promoted set after the snapshot was copied.
// Nothing here allocates: every array was sized in the constructor for the worst step.
#include "activekv/planner.hpp"

#include <algorithm>

namespace activekv {

const char* plan_outcome_text(PlanOutcome outcome) noexcept {
  switch (outcome) {
    case PlanOutcome::planned: return "planned";
    case PlanOutcome::too_many_contexts: return "more contexts than the budget manager has slots";
    case PlanOutcome::chunk_too_large: return "a context appends 0 tokens or more than --chunk-tokens in one step";
    case PlanOutcome::beyond_tokens_max: return "a context would grow beyond its tokens_max (at most --max-context)";
    case PlanOutcome::duplicate_context: return "a context is scheduled twice in one step";
    case PlanOutcome::no_staging_tiles:
      return "every staging tile is quarantined (a copy into each failed): recreate the runtime and its device";
  }
  return "?";
}

ResidencyPlanner::ResidencyPlanner(BudgetManager& budgets, ResidencyPolicy& policy,
                                   std::uint32_t promotions_per_layer_step)
    : budgets_(budgets), policy_(policy), mp_(budgets.plan()), promotions_per_layer_max_(promotions_per_layer_step) {
  const std::size_t slots = budgets.slots();
  const std::size_t layer_plans = slots * mp_.geometry.dense_layers;
  const std::size_t ranges_max = mp_.promoted_pages_per_layer + 2;  // + page 0 while the sink is missing
  // A range of n pages becomes at most ceil(n / tile_pages) + 1 copies (a partial first tile), so a
  // layer plan's copies are at most 2 × ranges + pages / tile_pages.
  const std::size_t copies_per_layer_plan =
      2 * ranges_max + mp_.budget.pages_per_layer_max / std::max(1u, mp_.arena.tile_pages) + 2;
  scheduled_.resize(slots);
  layers_.resize(layer_plans);
  copies_.resize(layer_plans * copies_per_layer_plan);
  passes_.resize(layer_plans * copies_per_layer_plan);
  promotions_.resize(layer_plans * promotions_per_layer_max_);
  ranges_.resize(ranges_max);
  chosen_.resize(std::max(1u, promotions_per_layer_max_));
  seen_.assign(slots, 0);
  length_before_.resize(slots);
  may_grow_.resize(slots);
  tail_last_.resize(slots);
  tail_first_.resize(slots);
  tile_order_.resize(mp_.arena.tiles);
  for (std::uint32_t t = 0; t < mp_.arena.tiles; ++t) tile_order_[t] = t;
  tiles_usable_ = mp_.arena.tiles;
  placements_.resize(layer_plans);
  promoted_logical_snapshot_.resize(layer_plans * mp_.promoted_pages_per_layer);
  promoted_page_snapshot_.resize(layer_plans * mp_.promoted_pages_per_layer);
  plan_.ring_storage = budgets.ring_storage();
  plan_.ring_capacity = budgets.ring_capacity();
  plan_.dense_layers = mp_.geometry.dense_layers;
  plan_.promoted_logical_storage = promoted_logical_snapshot_;
  plan_.promoted_page_storage = promoted_page_snapshot_;
  plan_.page_bytes = mp_.arena.page_bytes;
  plan_.page_pool_offset = mp_.arena.page_pool.offset_bytes;
  plan_.page_tokens = mp_.arena.page_tokens;
  plan_.host = &mp_.host;
}

PlanOutcome ResidencyPlanner::plan_step(std::span<const ScheduledContext> scheduled) noexcept {
  AK_ASSERT(!step_open_, "step_completed() must be called after each planned step, before the next");
  if (scheduled.size() > scheduled_.size()) return PlanOutcome::too_many_contexts;
  if (tiles_usable_ == 0) return PlanOutcome::no_staging_tiles;
  PlanOutcome outcome = PlanOutcome::planned;
  for (const ScheduledContext& s : scheduled) {
    AK_ASSERT(budgets_.current(s.context), "a scheduled context handle is stale or unknown");
    const ContextState& c = budgets_.context(s.context.slot);
    if (s.tokens_appended == 0 || s.tokens_appended > mp_.chunk_tokens) outcome = PlanOutcome::chunk_too_large;
    else if (c.length_tokens + static_cast<std::uint64_t>(s.tokens_appended) > c.tokens_max) outcome = PlanOutcome::beyond_tokens_max;
    else if (seen_[s.context.slot] != 0) outcome = PlanOutcome::duplicate_context;
    seen_[s.context.slot] = 1;
  }
  for (const ScheduledContext& s : scheduled) seen_[s.context.slot] = 0;
  if (outcome != PlanOutcome::planned) return outcome;

  ++step_;
  budgets_.set_step(step_);
  const auto entries = static_cast<std::uint32_t>(scheduled.size());
  std::copy(scheduled.begin(), scheduled.end(), scheduled_.begin());
  layer_count_ = copy_count_ = pass_count_ = promotion_count_ = 0;
  promoted_snapshot_count_ = 0;
  plan_.counters = StepCounters{};
  const std::uint64_t evicted_before = budgets_.counters().pages_evicted;

  const std::uint32_t layers = mp_.geometry.dense_layers;
  for (std::uint32_t e = 0; e < entries; ++e) {
    ContextState& c = budgets_.context(scheduled_[e].context.slot);
    length_before_[e] = c.length_tokens;
    // Page arithmetic once per context, not once per layer (a division costs tens of cycles).
    const std::uint32_t after = c.length_tokens + scheduled_[e].tokens_appended;
    c.tail_first_logical = c.length_tokens / mp_.arena.page_tokens;
    tail_first_[e] = c.tail_first_logical;
    tail_last_[e] = (after - 1) / mp_.arena.page_tokens;
    budgets_.touch(scheduled_[e].context.slot, step_);
  }
  // Phase 1. Most decode steps write into the run's newest page, which is resident: nothing to
  // place. The rest (a page boundary crossed: a new page, usually by sliding the run) are gathered
  // first, in the order they are placed (layer-major), so that the ring entries and page records
  // each placement touches can be fetched for all of them at once rather than one miss at a time.
  std::uint32_t placements = 0;
  for (std::uint32_t l = 0; l < layers; ++l) {
    for (std::uint32_t e = 0; e < entries; ++e) {
      const std::uint32_t slot = scheduled_[e].context.slot;
      const LayerResidency& r = budgets_.layer(slot, l);
      if (tail_first_[e] > 0 && tail_first_[e] >= r.run_first && tail_last_[e] < r.run_first + r.run_count) continue;
      placements_[placements++] = Placement{e, l};
      budgets_.prefetch_run_ends(slot, l);
    }
  }
  for (std::uint32_t i = 0; i < placements; ++i) {
    budgets_.prefetch_run_oldest_page(scheduled_[placements_[i].entry].context.slot, placements_[i].layer);
  }
  for (std::uint32_t i = 0; i < placements; ++i) place_tail_pages(placements_[i].entry, placements_[i].layer);
  // A context that can take no page now (nothing reserved, nothing free below its burst) cannot
  // later in this step either: promotions only consume pages. Decided once per context.
  for (std::uint32_t e = 0; e < entries; ++e) {
    const ContextState& c = budgets_.context(scheduled_[e].context.slot);
    may_grow_[e] = c.pages_reserved > 0 || (c.pages_held() < c.budget.burst_pages && budgets_.pages_borrowable() > 0);
  }
  StepSums sums;
  for (std::uint32_t l = 0; l < layers; ++l) {
    for (std::uint32_t e = 0; e < entries; ++e) plan_layer(e, l, sums);
  }
  for (std::uint32_t e = 0; e < entries; ++e) {
    budgets_.context(scheduled_[e].context.slot).length_tokens = length_before_[e] + scheduled_[e].tokens_appended;
  }

  plan_.step = step_;
  plan_.scheduled = {scheduled_.data(), entries};
  plan_.layers = {layers_.data(), layer_count_};
  plan_.copies = {copies_.data(), copy_count_};
  plan_.passes = {passes_.data(), pass_count_};
  plan_.promotions = {promotions_.data(), promotion_count_};
  plan_.counters.bytes_staged = sums.pages_staged * mp_.arena.page_bytes;
  plan_.counters.bytes_written_back = sums.rows_written_back * mp_.host.row_bytes;
  plan_.counters.pages_resident = sums.pages_resident;
  plan_.counters.pages_staged = sums.pages_staged;
  plan_.counters.copies = copy_count_;
  plan_.counters.passes = pass_count_;
  plan_.counters.promotions = promotion_count_;
  plan_.counters.pages_evicted = budgets_.counters().pages_evicted - evicted_before;
  step_open_ = true;
  AK_EXPENSIVE_ASSERT(budgets_.check() == nullptr, "budgets consistent after planning a step");
  return PlanOutcome::planned;
}

void ResidencyPlanner::step_completed() noexcept {
  PagePool& pool = budgets_.arena().pages();
  for (std::uint32_t i = 0; i < promotion_count_; ++i) {
    const PageId page = promotions_[i].pool_page;
    if (pool.current(page) && pool.state(page.index) == PageState::staging) pool.land(page);
  }
  step_open_ = false;
}

bool ResidencyPlanner::retire_tile(std::uint32_t tile_slot) noexcept {
  AK_ASSERT(!step_open_, "tiles are retired between steps");
  AK_ASSERT(tile_slot < mp_.arena.tiles, "retire_tile of a tile slot outside the arena");
  const auto begin = tile_order_.begin();
  const auto end = begin + tiles_usable_;
  const auto at = std::find(begin, end, tile_slot);
  if (at == end) return false;
  std::copy(at + 1, end, at);  // keeps the rotation ascending
  --tiles_usable_;
  return true;
}

void ResidencyPlanner::place_tail_pages(std::uint32_t entry, std::uint32_t l) noexcept {
  const std::uint32_t slot = scheduled_[entry].context.slot;
  const std::uint32_t P = mp_.arena.page_tokens;
  const std::uint32_t before = length_before_[entry];
  for (std::uint32_t p = tail_first_[entry]; p <= tail_last_[entry]; ++p) {
    LayerResidency& r = budgets_.layer(slot, l);
    if (p == 0) {
      if (r.sink_page != page_none) continue;
    } else if (r.run_count > 0 && p < r.run_first + r.run_count) {
      AK_ASSERT(p >= r.run_first, "a page the step writes is resident: tail pages are never evicted");
      continue;
    } else {
      AK_ASSERT(p * P >= before || r.run_count > 0, "a partly written tail page is resident");
    }
    AK_ASSERT(p == 0 || r.run_count == 0 || p == r.run_first + r.run_count, "the run grows by its next page");
    // At the layer's cap, or with no page to be had, the run slides: its oldest page is evicted and
    // taken back as the new tail. Sliding in place does both at once, with the same decisions.
    if (r.pages_held() >= budgets_.layer_cap_of(slot, l)) {
      if (p > 0 && budgets_.slide_run(slot, l, Reason::run_slides)) continue;
      const bool freed = budgets_.evict_one(slot, l, Reason::run_slides);
      AK_ASSERT(freed, "a layer at its cap has a page below its tail");
    }
    std::uint32_t page = budgets_.acquire_page(slot, l, p, PageState::owned, Reason::new_tail);
    if (page == page_none && p > 0 && budgets_.slide_run(slot, l, Reason::run_slides)) continue;
    if (page == page_none) {
      // The context is at its budget: its own oldest page in this layer (or, failing that, in the
      // layer with the most to give) makes room. The floor guarantees one exists.
      bool freed = budgets_.evict_one(slot, l, Reason::run_slides);
      for (std::uint32_t other = 0; !freed && other < mp_.geometry.dense_layers; ++other) {
        freed = budgets_.evict_one(slot, other, Reason::run_slides);
      }
      AK_ASSERT(freed, "a context at its budget has a page below its tails (the floor holds its tails)");
      page = budgets_.acquire_page(slot, l, p, PageState::owned, Reason::new_tail);
      AK_ASSERT(page != page_none, "an evicted page returns to the context's reservation");
    }
    if (p == 0) {
      budgets_.set_sink(slot, l, page);
    } else {
      budgets_.push_run_back(slot, l, page);
    }
  }
}

void ResidencyPlanner::plan_layer(std::uint32_t entry, std::uint32_t l, StepSums& sums) noexcept {
  AK_ASSERT(layer_count_ < layers_.size(), "layer plans sized for every slot and layer");
  const std::uint32_t slot = scheduled_[entry].context.slot;
  const LayerResidency& r = budgets_.layer(slot, l);
  // Built in a local whose address never escapes, stored once at the end: the helpers are inlined,
  // so its fields live in registers. (A record filled by out-of-line helpers and then copied whole
  // stalls on store forwarding: wide loads over narrow stores.)
  LayerPlan lp;
  lp.slot = slot;
  lp.layer = l;
  lp.entry = entry;
  lp.length_before = length_before_[entry];
  lp.length_tokens = length_before_[entry] + scheduled_[entry].tokens_appended;
  lp.sink_page = r.sink_page;
  lp.run_first = r.run_first;
  lp.run_count = r.run_count;
  lp.ring_head = r.ring_head;
  lp.promoted_offset = promoted_snapshot_count_;
  lp.promoted_count = r.promoted_count;
  if (r.promoted_count > 0) {
    const auto logicals = budgets_.promoted_logical(slot, l);
    const auto pages = budgets_.promoted_pages(slot, l);
    std::copy(logicals.begin(), logicals.end(), promoted_logical_snapshot_.begin() + promoted_snapshot_count_);
    std::copy(pages.begin(), pages.end(), promoted_page_snapshot_.begin() + promoted_snapshot_count_);
    promoted_snapshot_count_ += r.promoted_count;
  }
  AK_ASSERT(tail_last_[entry] == 0 ? lp.sink_page != page_none
                                   : lp.run_count > 0 && tail_last_[entry] + 1 == lp.run_first + lp.run_count,
            "the pages the step writes are the sink or end the run: the tail rows are resident");
  sums.rows_written_back += lp.length_tokens - lp.length_before;
  lp.copy_first = copy_count_;
  lp.pages_staged = stage_history(lp);
  lp.copy_count = copy_count_ - lp.copy_first;
  lp.promotion_first = promotion_count_;
  if (lp.pages_staged > 0 && promotions_per_layer_max_ > 0 && may_grow_[entry] != 0) {
    lp.promotion_count = promote(slot, l, lp.sink_page, lp.copy_first, lp.copy_count);
  }
  sums.pages_resident += lp.pages_resident();
  sums.pages_staged += lp.pages_staged;
  layers_[layer_count_++] = lp;
}

void ResidencyPlanner::open_pass(std::uint32_t layer) noexcept {
  AK_ASSERT(pass_count_ < passes_.size(), "passes sized for the worst step");
  passes_[pass_count_++] = StagePass{layer, copy_count_, 0, 0};
  tile_cursor_rank_ = 0;
  tile_cursor_page_ = 0;
}

void ResidencyPlanner::stage_range(std::uint32_t slot, std::uint32_t layer, std::uint32_t first,
                                   std::uint32_t count) noexcept {
  const ArenaPlan& a = mp_.arena;
  if (pass_count_ == 0 || passes_[pass_count_ - 1].layer != layer) open_pass(layer);
  // The cursor in locals: the copies written below would otherwise force it to be reloaded.
  std::uint32_t rank = tile_cursor_rank_, page = tile_cursor_page_;
  // A range that fits in one tile but not in what is left of the current one starts a fresh
  // tile rather than splitting: one large copy beats two, at the price of a partly empty tile.
  if (count <= a.tile_pages && page > 0 && count > a.tile_pages - page) page = a.tile_pages;
  const std::uint64_t page_bytes = a.page_bytes;
  // A window layer's ring wraps every ring_pages pages: a copy never crosses the wrap.
  const std::uint32_t ring_pages = mp_.host.is_ring(layer) ? mp_.host.ring_tokens / a.page_tokens : 0;
  while (count > 0) {
    if (page == a.tile_pages) {
      ++rank;
      page = 0;
    }
    if (rank == tiles_usable_) {
      open_pass(layer);
      rank = 0;
    }
    const std::uint32_t tile = tile_order_[rank];
    std::uint32_t n = std::min(count, a.tile_pages - page);
    if (ring_pages != 0) n = std::min(n, ring_pages - first % ring_pages);
    AK_ASSERT(copy_count_ < copies_.size(), "copies sized for the worst step");
    StageCopy& copy = copies_[copy_count_++];
    copy.slot = slot;
    copy.layer = layer;
    copy.logical_first = first;
    copy.pages = n;
    copy.host_offset = mp_.host.row_offset(slot, layer, first * a.page_tokens);  // n pages of P rows, contiguous
    copy.bytes = static_cast<std::uint64_t>(n) * page_bytes;
    copy.tile_slot = tile;
    copy.tile_page = page;
    copy.device_offset = a.tile_offset(tile) + static_cast<std::uint64_t>(page) * page_bytes;
    copy.pass = pass_count_ - 1;
    StagePass& pass = passes_[pass_count_ - 1];
    ++pass.copy_count;
    pass.tiles_used = rank + 1;
    page += n;
    first += n;
    count -= n;
  }
  tile_cursor_rank_ = rank;
  tile_cursor_page_ = page;
}

inline std::uint32_t ResidencyPlanner::stage_history(const LayerPlan& lp) noexcept {
  // Non-resident: logical pages [1, run_first) minus the promoted ones (the sink and the run are resident).
  const std::uint32_t P = mp_.arena.page_tokens;
  const std::uint32_t pages_total = tail_last_[lp.entry] + 1;
  const std::uint32_t stage_end = lp.run_count > 0 ? lp.run_first : std::min(pages_total, 1u);
  AK_ASSERT(lp.sink_page != page_none || lp.length_before == 0 || lp.length_before >= P,
            "a missing sink is never the page a step writes");
  // Page 0 is staged too while the sink is missing (its page was quarantined). A window layer
  // stages nothing below the first page its step's queries see (its ring no longer holds them).
  const std::uint32_t seen = mp_.host.first_page_seen(lp.layer, lp.length_before, P);
  std::uint32_t cursor = std::max(seen, lp.sink_page == page_none ? 0u : 1u);
  std::uint32_t staged = 0;
  for (std::uint32_t i = 0; i < lp.promoted_count; ++i) {
    const std::uint32_t q = promoted_logical_snapshot_[lp.promoted_offset + i];
    if (q < cursor) continue;
    if (q > cursor) {
      stage_range(lp.slot, lp.layer, cursor, q - cursor);
      staged += q - cursor;
    }
    cursor = q + 1;
  }
  if (stage_end > cursor) {
    stage_range(lp.slot, lp.layer, cursor, stage_end - cursor);
    staged += stage_end - cursor;
  }
  return staged;
}

std::uint32_t ResidencyPlanner::promote(std::uint32_t slot, std::uint32_t layer, std::uint32_t sink_page, std::uint32_t copy_first,
                                        std::uint32_t copy_count) noexcept {
  ContextState& c = budgets_.context(slot);
  const LayerResidency& r = budgets_.layer(slot, layer);
  const std::uint32_t cap = budgets_.layer_cap_of(slot, layer);
  if (r.pages_held() >= cap) return 0;
  std::uint64_t grantable = c.pages_reserved;
  // Retained device pages count as free here: they hold only pages that would be free (docs/PREFIX.md).
  if (c.pages_held() < c.budget.burst_pages) grantable += std::min(c.budget.burst_pages - c.pages_held(), budgets_.pages_borrowable());
  grantable = std::min<std::uint64_t>(grantable, cap - r.pages_held());
  if (grantable == 0) return 0;

  // Rebuild this layer's staged ranges from its copies (a range may span several copies).
  std::uint32_t range_count = 0;
  for (std::uint32_t i = 0; i < copy_count; ++i) {
    const StageCopy& copy = copies_[copy_first + i];
    if (range_count > 0 && ranges_[range_count - 1].first + ranges_[range_count - 1].count == copy.logical_first) {
      ranges_[range_count - 1].count += copy.pages;
    } else {
      AK_ASSERT(range_count < ranges_.size(), "staged ranges bounded by the promoted set + 1");
      ranges_[range_count++] = PageRange{copy.logical_first, copy.pages};
    }
  }
  PromotionQuery query;
  query.request_id = c.request_id;
  query.slot = slot;
  query.layer = layer;
  query.run_first = r.run_first;
  query.pages_grantable = static_cast<std::uint32_t>(std::min<std::uint64_t>(grantable, promotions_per_layer_max_));
  query.promoted_room = mp_.promoted_pages_per_layer - r.promoted_count;
  std::uint32_t n = 0;
  // A missing sink (quarantined, or never placed: a context that adopted its prefix from the host
  // prefix cache) is restored first, whatever the policy, when page 0 was staged: a window layer
  // whose window has moved past page 0 neither stages nor reads it, so it has no sink to restore.
  const bool sink_staged = range_count > 0 && ranges_[0].first == 0;
  if (sink_page == page_none && sink_staged) {
    chosen_[n++] = 0;
    --query.pages_grantable;
  }
  if (query.pages_grantable > 0) {
    n += policy_.choose_promotions(query, {ranges_.data(), range_count}, {chosen_.data() + n, chosen_.size() - n});
  }
  AK_ASSERT(n <= chosen_.size(), "a policy chooses at most the room it was given");
  const std::uint32_t promotion_first = promotion_count_;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t q = chosen_[i];
    const LayerResidency& now = budgets_.layer(slot, layer);
    const bool extends = now.run_count > 0 && q + 1 == now.run_first;
    const bool sink = q == 0;
    if (sink && now.sink_page != page_none) continue;
    if (!sink && !extends &&
        (now.promoted_count == mp_.promoted_pages_per_layer || (now.run_count > 0 && q >= now.run_first))) {
      continue;
    }
    const StageCopy* from = nullptr;
    for (std::uint32_t k = 0; k < copy_count && from == nullptr; ++k) {
      const StageCopy& copy = copies_[copy_first + k];
      if (q >= copy.logical_first && q < copy.logical_first + copy.pages) from = &copy;
    }
    AK_ASSERT(from != nullptr, "a policy promotes only pages staged this step");
    const std::uint32_t page =
        budgets_.acquire_page(slot, layer, q, PageState::staging, policy_.promotion_reason(), /*allow_reclaim=*/false);
    if (page == page_none) break;
    if (sink) {
      budgets_.set_sink(slot, layer, page);
    } else if (extends) {
      budgets_.push_run_front(slot, layer, page);
    } else {
      const bool added = budgets_.add_promoted(slot, layer, q, page);
      AK_ASSERT(added, "room in the promoted set was checked");
    }
    AK_ASSERT(promotion_count_ < promotions_.size(), "promotions sized for every slot and layer");
    Promotion& p = promotions_[promotion_count_++];
    p.slot = slot;
    p.layer = layer;
    p.logical = q;
    p.pool_page = budgets_.arena().pages().id(page);
    p.device_offset_from = from->device_offset + static_cast<std::uint64_t>(q - from->logical_first) * mp_.arena.page_bytes;
    p.device_offset_to = mp_.arena.page_offset(page);
    p.pass = from->pass;
    p.reason = policy_.promotion_reason();
    plan_.counters.bytes_promoted += mp_.arena.page_bytes;
    Decision d;
    d.step = step_;
    d.request_id = c.request_id;
    d.slot = slot;
    d.layer = layer;
    d.logical_page = q;
    d.pool_page = page;
    d.pages = 1;
    d.kind = DecisionKind::promote;
    d.reason = p.reason;
    budgets_.log().record(d);
  }
  return promotion_count_ - promotion_first;
}

WriteBack StepPlan::write_back(const LayerPlan& lp, std::uint32_t i) const noexcept {
  AK_DEBUG_ASSERT(i < write_back_count(lp), "write-back index outside the layer plan's tail pages");
  const std::uint32_t P = page_tokens;
  const std::uint32_t p = lp.length_before / P + i;
  const std::uint32_t first = std::max(lp.length_before, p * P);
  const std::uint32_t end = std::min(lp.length_tokens, (p + 1) * P);
  AK_ASSERT(p == 0 || (p >= lp.run_first && p < lp.run_first + lp.run_count), "a written page is in the run");
  WriteBack w;
  w.slot = lp.slot;
  w.layer = lp.layer;
  w.logical = p;
  w.pool_page = p == 0 ? lp.sink_page : run_page(lp, p - lp.run_first);
  w.row_first = first - p * P;
  w.rows = end - first;
  w.device_offset = page_pool_offset + static_cast<std::uint64_t>(w.pool_page) * page_bytes + w.row_first * host->row_bytes;
  w.host_offset = host->row_offset(lp.slot, lp.layer, first);
  w.bytes = w.rows * host->row_bytes;
  return w;
}

PageLocation StepPlan::locate(const LayerPlan& lp, std::uint32_t logical) const noexcept {
  PageLocation at;
  if (logical == 0 && lp.sink_page != page_none) {
    at.kind = PageLocation::Kind::pool;
    at.pool_page = lp.sink_page;
  } else if (lp.run_count > 0 && logical >= lp.run_first && logical < lp.run_first + lp.run_count) {
    at.kind = PageLocation::Kind::pool;
    at.pool_page = run_page(lp, logical - lp.run_first);
  } else {
    const std::uint32_t* begin = promoted_logical_storage.data() + lp.promoted_offset;
    const std::uint32_t* end = begin + lp.promoted_count;
    const std::uint32_t* found = std::lower_bound(begin, end, logical);
    if (found != end && *found == logical) {
      at.kind = PageLocation::Kind::pool;
      at.pool_page = promoted_page_storage[lp.promoted_offset + static_cast<std::uint32_t>(found - begin)];
    } else {
      for (std::uint32_t i = 0; i < lp.copy_count; ++i) {
        const StageCopy& c = copies[lp.copy_first + i];
        if (logical < c.logical_first || logical >= c.logical_first + c.pages) continue;
        at.kind = PageLocation::Kind::tile;
        at.tile_slot = c.tile_slot;
        at.tile_page = c.tile_page + (logical - c.logical_first);
        at.pass = c.pass;
        at.device_offset = c.device_offset + static_cast<std::uint64_t>(logical - c.logical_first) * page_bytes;
        return at;
      }
      return at;
    }
  }
  at.device_offset = page_pool_offset + static_cast<std::uint64_t>(at.pool_page) * page_bytes;
  return at;
}

}  // namespace activekv
