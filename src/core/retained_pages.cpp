// retained_pages.cpp — retained device pages (docs/PREFIX.md, "Device side"): the budget manager's
// half of device retention. A finished context's full device pages may stay in its free history's
// page tables as borrowed pages with no running owner; this file releases them (drop, shutdown),
// reclaims them first under pressure (whole histories, least recently retained first), trims an
// adopting context's handed-over pages to its budget, and places the pages a copy-on-adopt fills on
// the device. Invariant kept: retained pages only ever hold pages that would otherwise be free —
// they are counted in pages_assigned of their slot and in retained_total_, every one is released or
// handed over, and every release is counted and logged with its reason.
#include "activekv/budget.hpp"

namespace activekv {

bool BudgetManager::drop_one_adopted(std::uint32_t slot) noexcept {
  std::uint32_t best = UINT32_MAX;
  std::uint32_t most = 0;
  for (std::uint32_t l = 0; l < dense_layers_; ++l) {
    if (layer(slot, l).pages_held() > most) {
      best = l;
      most = layer(slot, l).pages_held();
    }
  }
  if (best == UINT32_MAX) return false;
  LayerResidency& r = layer(slot, best);
  if (r.promoted_count > 0) {
    drop_promoted_lowest(slot, best, DecisionKind::reclaim, Reason::retained_first, UINT32_MAX);
  } else if (r.run_count > 1) {
    drop_run_oldest(slot, best, DecisionKind::reclaim, Reason::retained_first, UINT32_MAX);
  } else if (r.run_count == 1) {
    const std::uint32_t page = run_page(slot, best, 0);
    record(DecisionKind::reclaim, Reason::retained_first, slot, best, r.run_first, page, 1);
    release_page(slot, page);
    r.run_count = 0;
    r.run_first = 1;
    r.ring_head = 0;
  } else {
    record(DecisionKind::reclaim, Reason::retained_first, slot, best, 0, r.sink_page, 1);
    release_page(slot, r.sink_page);
    r.sink_page = page_none;
  }
  ++counters_.retained_pages_reclaimed;
  return true;
}

std::uint64_t BudgetManager::release_retained(std::uint32_t slot, Reason reason) noexcept {
  ContextState& c = contexts_[slot];
  if (c.running || c.pages_assigned == 0) return 0;
  const std::uint64_t pages = c.pages_assigned;
  record(DecisionKind::reclaim, reason, slot, UINT32_MAX, UINT32_MAX, UINT32_MAX, static_cast<std::uint32_t>(pages));
  trim_tables(slot, 0);
  AK_ASSERT(c.pages_assigned == 0, "every retained device page was in the page tables");
  retained_total_ -= pages;
  counters_.retained_pages_reclaimed += pages;
  return pages;
}

std::uint64_t BudgetManager::reclaim_retained(std::uint64_t pages, std::uint32_t except) noexcept {
  std::uint64_t freed = 0;
  while (freed < pages && retained_total_ > 0) {
    std::uint32_t victim = UINT32_MAX;
    for (std::uint32_t s = 0; s < contexts_.size(); ++s) {
      if (s == except || contexts_[s].running || contexts_[s].pages_assigned == 0) continue;
      if (victim == UINT32_MAX || retained_stamp_[s] < retained_stamp_[victim]) victim = s;
    }
    if (victim == UINT32_MAX) break;
    const std::uint64_t n = release_retained(victim, Reason::retained_first);
    ++counters_.reclaim_steps;
    counters_.pages_reclaimed += n;
    freed += n;
  }
  return freed;
}

void BudgetManager::trim_tables(std::uint32_t slot, std::uint32_t keep_pages) noexcept {
  for (std::uint32_t l = 0; l < dense_layers_; ++l) {
    LayerResidency& r = layer(slot, l);
    while (r.run_count > 0 && r.run_first + r.run_count - 1 >= keep_pages) {
      release_page(slot, run_page(slot, l, r.run_count - 1));
      --r.run_count;
    }
    if (r.run_count == 0) {
      r.run_first = 1;
      r.ring_head = 0;
    }
    const std::uint32_t base = promoted_offset(slot, l);
    while (r.promoted_count > 0 && promoted_logical_[base + r.promoted_count - 1] >= keep_pages) {
      release_page(slot, promoted_page_[base + r.promoted_count - 1]);
      --r.promoted_count;
    }
    if (r.sink_page != page_none && keep_pages == 0) {
      release_page(slot, r.sink_page);
      r.sink_page = page_none;
    }
  }
}

std::uint32_t BudgetManager::release_runs(std::uint32_t slot, Reason reason) noexcept {
  AK_ASSERT(contexts_[slot].running, "release_runs of a context that is not running");
  std::uint32_t freed = 0;
  for (std::uint32_t l = 0; l < dense_layers_; ++l) {
    LayerResidency& r = layer(slot, l);
    for (std::uint32_t i = 0; i < r.run_count; ++i) {
      const std::uint32_t page = run_page(slot, l, i);
      AK_ASSERT(arena_.pages().state(page) == PageState::owned, "a run page given up between steps is final");
      record(DecisionKind::evict, reason, slot, l, r.run_first + i, page, 1);
      release_page(slot, page);
      ++freed;
    }
    r.run_count = 0;
    r.run_first = 1;
    r.ring_head = 0;
  }
  AK_EXPENSIVE_ASSERT(check() == nullptr, "budgets consistent after release_runs");
  return freed;
}

std::uint32_t BudgetManager::acquire_copy_page(std::uint32_t slot, std::uint32_t l, std::uint32_t logical) noexcept {
  ContextState& c = contexts_[slot];
  AK_ASSERT(c.running, "copied pages are placed for running contexts only");
  // Never the floor's reservation (the tail pages need it), never reclaimed from anyone (a retained
  // history being read may be the only one): an unreserved free page, within the burst and with
  // room left in the layer for the first step's tail page.
  if (pages_unreserved() == 0 || c.pages_held() >= c.budget.burst_pages) return page_none;
  if (layer(slot, l).pages_held() + 1 >= layer_cap_of(slot, l)) return page_none;
  const bool grow = c.pages_held() < c.budget.target_pages;
  const PageId page = arena_.pages().allocate(PageOwner{slot, l, logical}, PageState::staging);
  AK_ASSERT(page.valid(), "an unreserved free page exists");
  ++c.pages_assigned;
  if (grow) {
    ++counters_.pages_grown;
    record(DecisionKind::grow, Reason::prefix_copied, slot, l, logical, page.index, 1);
  } else {
    ++counters_.pages_borrowed;
    record(DecisionKind::borrow, Reason::prefix_copied, slot, l, logical, page.index, 1);
  }
  return page.index;
}

}  // namespace activekv
