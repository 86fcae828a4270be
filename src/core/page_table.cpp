// page_table.cpp — a context's pages per dense layer, kept as runs, and the budget checks
// that every page placement passes through (BudgetManager's residency half; see budget.hpp).
//
// Per layer: the sink (logical page 0), the newest run (a ring of pool pages for logical
// [run_first, run_first + run_count)), and the promoted pages (sorted, all below the run).
// Each mutation is O(1) except the promoted set's sorted insert (bounded by
// promoted_pages_per_layer), so a step costs what it changes, not what the history holds.
// Tail pages — those at or above the context's tail_first_logical — and the sink are never
// evicted or reclaimed: they are what the floor guarantees.
#include <algorithm>

#include "activekv/budget.hpp"

namespace activekv {

std::uint32_t BudgetManager::run_page(std::uint32_t slot, std::uint32_t l, std::uint32_t i) const noexcept {
  const LayerResidency& r = layer(slot, l);
  AK_DEBUG_ASSERT(i < r.run_count, "run index outside the run");
  return ring_[ring_offset(slot, l) + ring_index(r.ring_head, i)];
}

std::span<const std::uint32_t> BudgetManager::promoted_logical(std::uint32_t slot, std::uint32_t l) const noexcept {
  return {promoted_logical_.data() + promoted_offset(slot, l), layer(slot, l).promoted_count};
}

std::span<const std::uint32_t> BudgetManager::promoted_pages(std::uint32_t slot, std::uint32_t l) const noexcept {
  return {promoted_page_.data() + promoted_offset(slot, l), layer(slot, l).promoted_count};
}

std::uint32_t BudgetManager::acquire_page(std::uint32_t slot, std::uint32_t l, std::uint32_t logical, PageState state,
                                          Reason reason, bool allow_reclaim) noexcept {
  ContextState& c = contexts_[slot];
  AK_ASSERT(c.running, "pages are acquired for running contexts only");
  if (c.pages_reserved > 0) {
    --c.pages_reserved;
    --reserved_total_;
  } else if (c.pages_held() < c.budget.target_pages) {
    // Retained device pages only ever hold pages that would be free: they give way even where
    // reclamation from other contexts is not allowed (promotions).
    if (pages_unreserved() == 0 && reclaim_retained(1, slot) == 0 &&
        (!allow_reclaim || reclaim(1, slot, /*down_to_floor=*/false) == 0)) {
      return page_none;
    }
    ++counters_.pages_grown;
    record(DecisionKind::grow, Reason::to_target, slot, l, logical, UINT32_MAX, 1);
  } else if (c.pages_held() < c.budget.burst_pages && (pages_unreserved() > 0 || reclaim_retained(1, slot) > 0)) {
    ++counters_.pages_borrowed;
    record(DecisionKind::borrow, Reason::to_burst, slot, l, logical, UINT32_MAX, 1);
  } else {
    return page_none;
  }
  const PageId page = arena_.pages().allocate(PageOwner{slot, l, logical}, state);
  AK_ASSERT(page.valid(), "a reserved or unreserved free page exists when the budget grants one");
  ++c.pages_assigned;
  (void)reason;
  AK_ASSERT(c.pages_held() <= c.budget.burst_pages, "invariant 2: a context never holds more than its burst");
  return page.index;
}

void BudgetManager::release_page(std::uint32_t slot, std::uint32_t pool_page) noexcept {
  PagePool& pool = arena_.pages();
  AK_ASSERT(pool.owner(pool_page).slot == slot, "a context releases only its own pages");
  if (pool.state(pool_page) != PageState::quarantined) pool.release(pool.id(pool_page));
  --contexts_[slot].pages_assigned;
}

void BudgetManager::push_run_back(std::uint32_t slot, std::uint32_t l, std::uint32_t pool_page) noexcept {
  LayerResidency& r = layer(slot, l);
  const std::uint32_t logical = arena_.pages().owner(pool_page).logical;
  AK_ASSERT(logical >= 1, "logical page 0 is the sink, not part of the run");
  if (r.run_count == 0) r.run_first = logical;
  AK_ASSERT(logical == r.run_first + r.run_count, "the run grows at its newest end by one logical page");
  AK_ASSERT(r.run_count < ring_capacity_, "the run ring holds at most layer_pages_max pages");
  ring_[ring_offset(slot, l) + ring_index(r.ring_head, r.run_count)] = pool_page;
  ++r.run_count;
}

void BudgetManager::push_run_front(std::uint32_t slot, std::uint32_t l, std::uint32_t pool_page) noexcept {
  LayerResidency& r = layer(slot, l);
  const std::uint32_t logical = arena_.pages().owner(pool_page).logical;
  AK_ASSERT(r.run_count > 0, "the run extends downward only from an existing run");
  AK_ASSERT(logical + 1 == r.run_first && logical >= 1, "the run grows at its oldest end by one logical page");
  AK_ASSERT(r.run_count < ring_capacity_, "the run ring holds at most layer_pages_max pages");
  r.ring_head = ring_index(r.ring_head, ring_capacity_ - 1);
  ring_[ring_offset(slot, l) + r.ring_head] = pool_page;
  --r.run_first;
  ++r.run_count;
  ++counters_.pages_promoted;
}

void BudgetManager::set_sink(std::uint32_t slot, std::uint32_t l, std::uint32_t pool_page) noexcept {
  LayerResidency& r = layer(slot, l);
  AK_ASSERT(r.sink_page == page_none, "a layer has one sink page");
  AK_ASSERT(arena_.pages().owner(pool_page).logical == 0, "the sink holds logical page 0");
  r.sink_page = pool_page;
}

bool BudgetManager::add_promoted(std::uint32_t slot, std::uint32_t l, std::uint32_t logical,
                                 std::uint32_t pool_page) noexcept {
  LayerResidency& r = layer(slot, l);
  if (r.promoted_count == plan_.promoted_pages_per_layer) return false;
  AK_ASSERT(logical >= 1, "the sink is not promoted");
  AK_ASSERT(r.run_count == 0 || logical + 1 < r.run_first, "a promoted page lies below the run, not adjacent to it");
  std::uint32_t* logicals = promoted_logical_.data() + promoted_offset(slot, l);
  std::uint32_t* pages = promoted_page_.data() + promoted_offset(slot, l);
  std::uint32_t at = static_cast<std::uint32_t>(std::lower_bound(logicals, logicals + r.promoted_count, logical) - logicals);
  AK_ASSERT(at == r.promoted_count || logicals[at] != logical, "a page is promoted once");
  for (std::uint32_t i = r.promoted_count; i > at; --i) {
    logicals[i] = logicals[i - 1];
    pages[i] = pages[i - 1];
  }
  logicals[at] = logical;
  pages[at] = pool_page;
  ++r.promoted_count;
  ++counters_.pages_promoted;
  return true;
}

std::uint32_t BudgetManager::evictable(std::uint32_t slot, std::uint32_t l) const noexcept {
  const LayerResidency& r = layer(slot, l);
  const std::uint32_t tail_first = contexts_[slot].tail_first_logical;
  std::uint32_t run_below_tail = 0;
  if (r.run_count > 0 && r.run_first < tail_first) run_below_tail = std::min(r.run_count, tail_first - r.run_first);
  // The run's newest page always holds the newest token: never evictable.
  run_below_tail = std::min(run_below_tail, r.run_count > 0 ? r.run_count - 1 : 0u);
  return r.promoted_count + run_below_tail;
}

std::uint32_t BudgetManager::held_end_logical(std::uint32_t slot) const noexcept {
  std::uint32_t end = 0;
  for (std::uint32_t l = 0; l < dense_layers_; ++l) {
    const LayerResidency& r = layer(slot, l);
    if (r.sink_page != page_none) end = std::max(end, 1u);
    if (r.run_count > 0) end = std::max(end, r.run_first + r.run_count);
    if (r.promoted_count > 0) end = std::max(end, promoted_logical(slot, l)[r.promoted_count - 1] + 1);
  }
  return end;
}

void BudgetManager::start_at(ContextHandle context, std::uint32_t tokens) noexcept {
  AK_ASSERT(current(context), "start_at of a stale or unknown context handle");
  ContextState& c = contexts_[context.slot];
  const std::uint32_t P = plan_.arena.page_tokens;
  AK_ASSERT(tokens >= c.length_tokens, "a context starts at or after the rows it holds");
  AK_ASSERT(tokens <= c.tokens_max, "a context starts within its tokens_max");
  AK_ASSERT(held_end_logical(context.slot) <= (tokens + P - 1) / P, "a context holds no page past its rows");
  c.length_tokens = tokens;
  c.tail_first_logical = tokens / P;
  AK_EXPENSIVE_ASSERT(check() == nullptr, "budgets consistent after start_at");
}

void BudgetManager::drop_run_oldest(std::uint32_t slot, std::uint32_t l, DecisionKind kind, Reason reason,
                                    std::uint32_t other_slot) noexcept {
  LayerResidency& r = layer(slot, l);
  AK_ASSERT(r.run_count > 1, "the run's newest page is never dropped");
  const std::uint32_t page = ring_[ring_offset(slot, l) + r.ring_head];
  record(kind, reason, slot, l, r.run_first, page, 1, other_slot);
  release_page(slot, page);
  r.ring_head = ring_index(r.ring_head, 1);
  ++r.run_first;
  --r.run_count;
}

void BudgetManager::drop_promoted_lowest(std::uint32_t slot, std::uint32_t l, DecisionKind kind, Reason reason,
                                         std::uint32_t other_slot) noexcept {
  LayerResidency& r = layer(slot, l);
  AK_ASSERT(r.promoted_count > 0, "no promoted page to drop");
  std::uint32_t* logicals = promoted_logical_.data() + promoted_offset(slot, l);
  std::uint32_t* pages = promoted_page_.data() + promoted_offset(slot, l);
  record(kind, reason, slot, l, logicals[0], pages[0], 1, other_slot);
  release_page(slot, pages[0]);
  std::copy(logicals + 1, logicals + r.promoted_count, logicals);
  std::copy(pages + 1, pages + r.promoted_count, pages);
  --r.promoted_count;
}

bool BudgetManager::evict_one(std::uint32_t slot, std::uint32_t l, Reason reason) noexcept {
  const LayerResidency& r = layer(slot, l);
  ContextState& c = contexts_[slot];
  const bool run_may_slide = r.run_count > 1 && r.run_first < c.tail_first_logical;
  if (run_may_slide) {
    drop_run_oldest(slot, l, DecisionKind::evict, reason, UINT32_MAX);
  } else if (r.promoted_count > 0) {
    drop_promoted_lowest(slot, l, DecisionKind::evict, reason, UINT32_MAX);
  } else {
    return false;
  }
  // The freed page stays with the context: held is unchanged.
  ++c.pages_reserved;
  ++reserved_total_;
  ++counters_.pages_evicted;
  return true;
}

bool BudgetManager::slide_run(std::uint32_t slot, std::uint32_t l, Reason reason) noexcept {
  LayerResidency& r = layer(slot, l);
  if (r.run_count < 2 || r.run_first >= contexts_[slot].tail_first_logical) return false;
  PagePool& pool = arena_.pages();
  std::uint32_t* ring = ring_.data() + ring_offset(slot, l);
  const std::uint32_t page = ring[r.ring_head];
  if (pool.state(page) != PageState::owned) return false;
  const std::uint32_t logical = r.run_first + r.run_count;
  AK_ASSERT(pool.owner(page).slot == slot && pool.owner(page).logical == r.run_first, "the ring names the run's oldest page");
  record(DecisionKind::evict, reason, slot, l, r.run_first, page, 1, UINT32_MAX);
  pool.reassign(pool.id(page), PageOwner{slot, l, logical});
  ring[ring_index(r.ring_head, r.run_count)] = page;  // the slot after the newest, freed by the head moving on
  r.ring_head = ring_index(r.ring_head, 1);
  ++r.run_first;
  ++counters_.pages_evicted;
  return true;
}

bool BudgetManager::quarantine(PageId page) noexcept {
  PagePool& pool = arena_.pages();
  AK_ASSERT(pool.current(page), "quarantine of a stale page handle");
  const PageOwner owner = pool.owner(page.index);
  pool.quarantine_page(page);
  if (owner.slot >= contexts_.size()) return true;
  if (!contexts_[owner.slot].running) {
    // A retained history's device page: the history's device pages go (the host copy stays).
    release_retained(owner.slot, Reason::retained_cancelled);
    return true;
  }
  const std::uint32_t slot = owner.slot;
  ContextState& c = contexts_[slot];
  LayerResidency& r = layer(slot, owner.layer);
  const std::uint32_t P = plan_.arena.page_tokens;
  const bool is_tail = owner.logical >= c.tail_first_logical || owner.logical == (c.length_tokens == 0 ? 0 : (c.length_tokens - 1) / P);
  if (is_tail) return false;  // the page stays in the table, quarantined; the context must be cancelled
  record(DecisionKind::reclaim, Reason::cancelled, slot, owner.layer, owner.logical, page.index, 1);
  if (owner.logical == 0) {
    AK_ASSERT(r.sink_page == page.index, "a page owning logical page 0 is the sink");
    r.sink_page = page_none;
    --c.pages_assigned;
  } else if (r.run_count > 0 && owner.logical >= r.run_first) {
    AK_ASSERT(owner.logical < r.run_first + r.run_count - 1, "the run's newest page is a tail page");
    while (r.run_first < owner.logical) drop_run_oldest(slot, owner.layer, DecisionKind::evict, Reason::run_slides, UINT32_MAX);
    // Now the quarantined page is the run's oldest: drop it without releasing it to the pool.
    r.ring_head = ring_index(r.ring_head, 1);
    ++r.run_first;
    --r.run_count;
    --c.pages_assigned;
    // The pages dropped above went back to the pool; the floor loop below reserves what it needs.
  } else {
    std::uint32_t* logicals = promoted_logical_.data() + promoted_offset(slot, owner.layer);
    std::uint32_t* pages = promoted_page_.data() + promoted_offset(slot, owner.layer);
    std::uint32_t at = 0;
    while (at < r.promoted_count && logicals[at] != owner.logical) ++at;
    AK_ASSERT(at < r.promoted_count, "a quarantined page of a running context is in its page table");
    std::copy(logicals + at + 1, logicals + r.promoted_count, logicals + at);
    std::copy(pages + at + 1, pages + r.promoted_count, pages + at);
    --r.promoted_count;
    --c.pages_assigned;
  }
  // Hold the floor: a free page replaces the one lost, reclaimed from others if needed.
  while (c.pages_held() < c.budget.floor_pages) {
    if (pages_unreserved() == 0 && reclaim(1, slot, /*down_to_floor=*/true) == 0) return false;
    ++c.pages_reserved;
    ++reserved_total_;
  }
  AK_EXPENSIVE_ASSERT(check() == nullptr, "budgets consistent after quarantine");
  return true;
}

const char* BudgetManager::check() const noexcept {
  const PagePool& pool = arena_.pages();
  if (const char* broken = pool.check()) return broken;
  std::uint64_t reserved = 0, floors = 0, assigned = 0, retained = 0;
  std::uint32_t running = 0;
  for (std::uint32_t s = 0; s < contexts_.size(); ++s) {
    const ContextState& c = contexts_[s];
    if (!c.running) {
      if (c.pages_assigned == 0) continue;
      // A free history's retained device pages: owned, final, and not in a retired history.
      if (retired_[s] != 0) return "a retired history holds retained device pages";
      if (c.pages_reserved != 0) return "a free history holds reserved pages";
      retained += c.pages_assigned;
    } else {
      ++running;
      reserved += c.pages_reserved;
      floors += c.budget.floor_pages;
      if (c.pages_held() < c.budget.floor_pages) return "invariant 2: a running context holds less than its floor";
      if (c.pages_held() > c.budget.burst_pages) return "invariant 2: a running context holds more than its burst";
    }
    assigned += c.pages_assigned;
    std::uint64_t in_tables = 0;
    for (std::uint32_t l = 0; l < dense_layers_; ++l) {
      const LayerResidency& r = layer(s, l);
      if (c.running && r.pages_held() > layer_cap_of(s, l)) return "a layer holds more than its page cap";
      in_tables += r.pages_held();
      auto owned_by = [&](std::uint32_t page, std::uint32_t logical) {
        if (page >= pool.pages_total()) return false;
        const PageState st = pool.state(page);
        if (!c.running && st != PageState::owned) return false;
        if (st != PageState::owned && st != PageState::staging && st != PageState::quarantined) return false;
        const PageOwner& o = pool.owner(page);
        return o.slot == s && o.layer == l && o.logical == logical;
      };
      if (r.sink_page != page_none && !owned_by(r.sink_page, 0)) return "a sink page is not owned by its context";
      if (r.run_count > 0 && r.run_first < 1) return "a run starts at the sink";
      for (std::uint32_t i = 0; i < r.run_count; ++i) {
        if (!owned_by(run_page(s, l, i), r.run_first + i)) return "a run page is not owned by its context and logical page";
      }
      const auto logicals = promoted_logical(s, l);
      const auto pages = promoted_pages(s, l);
      for (std::uint32_t i = 0; i < r.promoted_count; ++i) {
        if (!owned_by(pages[i], logicals[i])) return "a promoted page is not owned by its context and logical page";
        if (i > 0 && logicals[i - 1] >= logicals[i]) return "the promoted set is not sorted";
        if (r.run_count > 0 && logicals[i] >= r.run_first) return "a promoted page lies inside or above the run";
        if (logicals[i] == 0) return "the sink is in the promoted set";
      }
    }
    if (in_tables != c.pages_assigned) return "a context's assigned count differs from its page tables";
    if (c.running) {
      // The floor covers the tail: what may never be taken (sink, tail, the run's newest) fits the floor.
      std::uint64_t kept = 0;
      for (std::uint32_t l = 0; l < dense_layers_; ++l) kept += layer(s, l).pages_held() - evictable(s, l);
      if (kept > c.budget.floor_pages) return "a running context's sink and tail pages exceed its floor";
    }
  }
  if (running != running_) return "the running count differs from the slots";
  if (running_ > running_max_) return "more contexts run than the concurrency";
  if (reserved != reserved_total_) return "the reserved total differs from the contexts' reservations";
  if (retained != retained_total_) return "the retained device pages differ from the free histories' tables";
  if (floors != floors_committed_) return "the committed floors differ from the contexts' floors";
  if (reserved_total_ > pool.pages_free()) return "more pages are reserved than are free";
  const std::uint64_t in_use = static_cast<std::uint64_t>(pool.pages_owned()) + pool.pages_staging();
  if (assigned < in_use) return "a page in use belongs to no running context";
  if (assigned > in_use + pool.pages_quarantined()) return "a context holds a page that is free";
  if (free_slot_count_ + running_ + retired_count_ + held_count_ != contexts_.size()) {
    return "free + running + retired + held histories differ from the slots";
  }
  for (std::uint32_t i = 0; i < free_slot_count_; ++i) {
    if (retired_[free_slots_[i]] != 0) return "a retired history is on the free list";
    if (held_[free_slots_[i]] != 0) return "a held history is on the free list";
  }
  return nullptr;
}

void BudgetManager::validate() const noexcept {
  const char* broken = check();
  AK_ASSERT(broken == nullptr, broken);
}

}  // namespace activekv
