// budget.cpp — admission, the FIFO queue, growth and reclamation (see budget.hpp).
//
// Accounting, kept exact at every return:
//   held(c)        = assigned(c) + reserved(c)
//   reserved_total = Σ reserved(c) ≤ pages_free     (a reservation is a claim on free pages)
//   floors_committed = Σ floor(c) ≤ pages usable    (so every floor can always be honoured)
// Reserved pages carry no data, so reclamation takes them first; a context's
// assigned pages are freed from the layer that holds the most evictable pages
// (ties: the lowest layer), promoted pages before the run's oldest pages.
#include <algorithm>

#include "activekv/budget.hpp"

namespace activekv {

Status validate_budget(const Budget& b, const MemoryPlan& plan) {
  const BudgetPlan& p = plan.budget;
  if (b.floor_pages < p.floor_pages_min) {
    return make_error(ErrorCode::invalid_argument, "--floor-pages",
                      "floor " + std::to_string(b.floor_pages) + " is below the minimum floor of " +
                          std::to_string(p.floor_pages_min) + " pages (1 sink + the tail pages of one step, per dense layer)");
  }
  if (b.floor_pages > b.target_pages) {
    return make_error(ErrorCode::invalid_argument, "--target-pages",
                      "target " + std::to_string(b.target_pages) + " is below the floor " + std::to_string(b.floor_pages) +
                          ": floor ≤ target ≤ burst");
  }
  if (b.target_pages > b.burst_pages) {
    return make_error(ErrorCode::invalid_argument, "--burst-pages",
                      "burst " + std::to_string(b.burst_pages) + " is below the target " + std::to_string(b.target_pages) +
                          ": floor ≤ target ≤ burst");
  }
  if (b.burst_pages > p.burst_pages) {
    return make_error(ErrorCode::invalid_argument, "--burst-pages",
                      "burst " + std::to_string(b.burst_pages) + " is above the plan's burst of " +
                          std::to_string(p.burst_pages) + " pages, for which the page tables were sized: raise --burst-pages");
  }
  if (b.floor_pages > plan.arena.pages) {
    return make_error(ErrorCode::refused, "--floor-pages", "the floor does not fit the page pool: raise --device-pool");
  }
  return Status::success();
}

BudgetManager::BudgetManager(const MemoryPlan& plan, Arena& arena, DecisionLog& log)
    : plan_(plan), arena_(arena), log_(log), dense_layers_(plan.geometry.dense_layers),
      ring_capacity_(plan.budget.layer_pages_max) {
  if (plan.host.ring_tokens != 0) {
    const std::uint32_t P = plan.arena.page_tokens;
    window_cap_ = std::max(plan.budget.floor_pages_per_layer, 1 + (plan.host.ring_tokens + P - 1) / P);
  }
  AK_ASSERT(arena.pages().pages_total() == plan.arena.pages, "the arena was built from another plan");
  AK_ASSERT(dense_layers_ > 0, "a plan has at least one dense layer");
  // One slot per mapped host history: the concurrency plus the retained-history allowance (whose
  // extra histories only keep retained prefixes: admission also needs running < running_max_).
  const std::uint32_t slots = plan.host.history_slots;
  slot_count_ = slots;
  running_max_ = plan.host.concurrency;
  const std::size_t layer_slots = static_cast<std::size_t>(slots) * dense_layers_;
  contexts_.resize(slots);
  layers_.resize(layer_slots);
  ring_.assign(layer_slots * ring_capacity_, page_none);
  promoted_logical_.assign(layer_slots * plan.promoted_pages_per_layer, page_none);
  promoted_page_.assign(layer_slots * plan.promoted_pages_per_layer, page_none);
  free_slots_.resize(slots);
  for (std::uint32_t i = 0; i < slots; ++i) free_slots_[i] = slots - 1 - i;  // slot 0 is used first
  free_slot_count_ = slots;
  retired_.assign(slots, 0);
  held_.assign(slots, 0);
  retained_stamp_.assign(slots, 0);
  queue_.resize(std::max(1u, plan.queue_max));
  admitted_.resize(std::max(1u, slots));  // entries are running contexts (finish removes theirs)
  order_.resize(slots);
}

void BudgetManager::record(DecisionKind kind, Reason reason, std::uint32_t slot, std::uint32_t layer,
                           std::uint32_t logical, std::uint32_t pool_page, std::uint32_t pages,
                           std::uint32_t other_slot) noexcept {
  Decision d;
  d.step = step_;
  d.request_id = slot < contexts_.size() ? contexts_[slot].request_id : 0;
  d.slot = slot;
  d.layer = layer;
  d.logical_page = logical;
  d.pool_page = pool_page;
  d.pages = pages;
  d.other_slot = other_slot;
  d.kind = kind;
  d.reason = reason;
  log_.record(d);
}

Status BudgetManager::check_request(std::uint32_t tokens_max) const {
  if (tokens_max == 0) return make_error(ErrorCode::invalid_argument, "--max-context", "a context needs at least 1 token");
  if (tokens_max > plan_.host.max_context_tokens) {
    return make_error(ErrorCode::refused, "--max-context",
                      "a context of " + std::to_string(tokens_max) + " tokens is longer than the max context (" +
                          std::to_string(plan_.host.max_context_tokens) +
                          " tokens): raise --max-context (and --host-pool with it) or shorten the request");
  }
  return Status::success();
}

bool BudgetManager::budget_ok(const Budget& b) const noexcept {
  return b.floor_pages >= plan_.budget.floor_pages_min && b.floor_pages <= b.target_pages &&
         b.target_pages <= b.burst_pages && b.burst_pages <= plan_.budget.burst_pages &&
         b.floor_pages <= plan_.arena.pages;
}

bool BudgetManager::floor_fits(std::uint64_t floor_pages) const noexcept {
  const PagePool& pool = arena_.pages();
  const std::uint64_t usable = pool.pages_total() - pool.pages_quarantined();
  return floors_committed_ + floor_pages <= usable;
}

AdmitResult BudgetManager::submit(std::uint64_t request_id, std::uint32_t tokens_max, const Budget* budget,
                                  std::uint32_t preferred_slot, bool adopt) noexcept {
  Waiting request{request_id, tokens_max,
                  budget != nullptr ? *budget
                                    : Budget{plan_.budget.floor_pages, plan_.budget.target_pages, plan_.budget.burst_pages},
                  preferred_slot, adopt};
  AdmitResult result;
  result.request_id = request_id;
  auto refuse = [&](Reason reason) {
    ++counters_.refused;
    Decision d;
    d.step = step_;
    d.request_id = request_id;
    d.kind = DecisionKind::refuse;
    d.reason = reason;
    log_.record(d);
    result.outcome = AdmitOutcome::refused;
    result.reason = reason;
    return result;
  };
  if (tokens_max == 0 || tokens_max > plan_.host.max_context_tokens) return refuse(Reason::context_too_long);
  if (retired_count_ == contexts_.size()) return refuse(Reason::no_usable_history);
  if (!budget_ok(request.budget)) return refuse(Reason::budget_invalid);

  Reason wait = Reason::floor_fits;
  if (queue_size_ > 0) {
    wait = Reason::queue_not_empty;
  } else if (free_slot_count_ == 0 || running_ >= running_max_) {
    wait = Reason::no_free_history;
  } else if (!floor_fits(request.budget.floor_pages)) {
    wait = Reason::floor_does_not_fit;
  } else {
    const Reason why = pages_unreserved() >= request.budget.floor_pages ? Reason::floor_fits : Reason::floor_fits_after_reclaim;
    return admit(request, why, adopt);
  }
  if (queue_size_ == queue_.size() || plan_.queue_max == 0) return refuse(Reason::queue_full);
  queue_[(queue_head_ + queue_size_) % queue_.size()] = request;
  ++queue_size_;
  ++counters_.queued;
  Decision d;
  d.step = step_;
  d.request_id = request_id;
  d.kind = DecisionKind::queue;
  d.reason = wait;
  d.pages = static_cast<std::uint32_t>(request.budget.floor_pages);
  log_.record(d);
  result.outcome = AdmitOutcome::queued;
  result.reason = wait;
  return result;
}

AdmitResult BudgetManager::admit(const Waiting& request, Reason reason, bool adopt) noexcept {
  AK_ASSERT(free_slot_count_ > 0, "admission needs a free host history");
  AK_ASSERT(running_ < running_max_, "admission needs room below the concurrency");
  AK_ASSERT(floor_fits(request.budget.floor_pages), "admission needs room for the floor");
  const std::uint32_t slot = take_free_slot(request.preferred_slot);
  ContextState& c = contexts_[slot];
  AK_ASSERT(!c.running, "a free slot holds no running context");
  // The history's retained device pages: taken over in place by a context adopting its prefix,
  // released otherwise (the new context will write other rows).
  const bool adopting = adopt && slot == request.preferred_slot && c.pages_assigned > 0;
  if (adopting) {
    retained_total_ -= c.pages_assigned;
  } else {
    release_retained(slot, Reason::retained_lru);
  }
  const std::uint64_t adopted = c.pages_assigned;
  const std::uint32_t generation = c.generation + 1;
  c = ContextState{};
  c.pages_assigned = adopted;
  c.generation = generation;
  c.request_id = request.request_id;
  c.running = true;
  c.budget = request.budget;
  c.tokens_max = request.tokens_max;
  c.last_active_step = step_;
  c.admitted_order = ++admissions_;
  const std::uint64_t per_layer = (request.budget.burst_pages + dense_layers_ - 1) / dense_layers_;
  c.layer_cap = static_cast<std::uint32_t>(std::min<std::uint64_t>(per_layer, plan_.budget.layer_pages_max));
  c.layer_cap = std::max(c.layer_cap, plan_.budget.floor_pages_per_layer);
  if (!adopting) {
    for (std::uint32_t l = 0; l < dense_layers_; ++l) layer(slot, l) = LayerResidency{};
  }
  // The adopted pages hold rows this context will not write (its first step writes past them): its
  // tail starts after them, so none counts against the floor's sink-and-tail bound and reclamation
  // may take them before that first step (start_at() then names the exact length).
  c.tail_first_logical = held_end_logical(slot);
  ++running_;
  floors_committed_ += request.budget.floor_pages;
  // Adopted pages sit above the floor (which is reserved in full, so the tail pages can always be
  // placed): trimmed to the burst and to the layer cap.
  auto over = [&] {
    if (c.pages_assigned + request.budget.floor_pages > request.budget.burst_pages) return true;
    for (std::uint32_t l = 0; l < dense_layers_; ++l) {
      if (layer(slot, l).pages_held() > layer_cap_of(slot, l)) return true;
    }
    return false;
  };
  while (adopting && over() && drop_one_adopted(slot)) {
  }

  // Reserve the floor, in the reclamation order with the adopted pages in it: retained pages of
  // other histories; the adopted pages above this context's target (borrowed); others' borrowed
  // pages; the rest of the adopted pages; then others' pages down toward their floors.
  const std::uint64_t floor = request.budget.floor_pages;
  if (adopting && pages_unreserved() < floor) {
    reclaim_retained(floor - pages_unreserved(), slot);
    while (pages_unreserved() < floor && c.pages_assigned + floor > request.budget.target_pages &&
           drop_one_adopted(slot)) {
    }
    if (pages_unreserved() < floor) reclaim(floor - pages_unreserved(), slot, /*down_to_floor=*/false);
    while (pages_unreserved() < floor && drop_one_adopted(slot)) {
    }
  }
  if (pages_unreserved() < floor) reclaim(floor - pages_unreserved(), slot, /*down_to_floor=*/true);
  AK_ASSERT(pages_unreserved() >= request.budget.floor_pages, "a committed floor can always be reserved");
  c.pages_reserved = request.budget.floor_pages;
  reserved_total_ += request.budget.floor_pages;
  ++counters_.admitted;
  record(DecisionKind::admit, reason, slot, UINT32_MAX, UINT32_MAX, UINT32_MAX,
         static_cast<std::uint32_t>(request.budget.floor_pages));
  if (c.pages_assigned > 0) {
    counters_.retained_pages_adopted += c.pages_assigned;
    record(DecisionKind::adopt, Reason::device_pages_adopted, slot, UINT32_MAX, UINT32_MAX, UINT32_MAX,
           static_cast<std::uint32_t>(c.pages_assigned));
  }
  AK_EXPENSIVE_ASSERT(check() == nullptr, "budgets consistent after admission");
  return AdmitResult{AdmitOutcome::admitted, ContextHandle{slot, generation}, request.request_id, reason,
                     static_cast<std::uint32_t>(c.pages_assigned)};
}

std::uint32_t BudgetManager::take_free_slot(std::uint32_t preferred) noexcept {
  AK_ASSERT(free_slot_count_ > 0, "a free slot to take");
  // The stack's top is the default; a slot that holds a retained history is taken only when no
  // other is free, the least recently retained first (its holder drops it: retained never blocks).
  std::uint32_t at = free_slot_count_;
  for (std::uint32_t i = 0; i < free_slot_count_; ++i) {
    if (free_slots_[i] == preferred) at = i;
  }
  for (std::uint32_t i = free_slot_count_; at == free_slot_count_ && i-- > 0;) {
    if (retained_stamp_[free_slots_[i]] == 0) at = i;
  }
  if (at == free_slot_count_) {
    at = 0;
    for (std::uint32_t i = 1; i < free_slot_count_; ++i) {
      if (retained_stamp_[free_slots_[i]] < retained_stamp_[free_slots_[at]]) at = i;
    }
  }
  const std::uint32_t slot = free_slots_[at];
  for (std::uint32_t i = at; i + 1 < free_slot_count_; ++i) free_slots_[i] = free_slots_[i + 1];  // order kept
  --free_slot_count_;
  return slot;
}

bool BudgetManager::retire_history(std::uint32_t slot) noexcept {
  AK_ASSERT(slot < contexts_.size(), "retire_history of a slot outside the budget manager");
  AK_ASSERT(!contexts_[slot].running, "a running context's history is retired only after it is cancelled");
  if (retired_[slot] != 0) return false;
  release_retained(slot, Reason::retained_cancelled);
  if (held_[slot] != 0 && !contexts_[slot].running) {  // held off the free list: retired when released
    retired_[slot] = 1;
    ++retired_count_;
    --held_count_;
    record(DecisionKind::retire, Reason::host_range_quarantined, slot, UINT32_MAX, UINT32_MAX, UINT32_MAX, 0);
    return true;
  }
  // Out of the free list, keeping its order (slot 0 is used first).
  std::uint32_t kept = 0;
  for (std::uint32_t i = 0; i < free_slot_count_; ++i) {
    if (free_slots_[i] != slot) free_slots_[kept++] = free_slots_[i];
  }
  AK_ASSERT(kept + 1 == free_slot_count_, "a slot that is not running is on the free list");
  free_slot_count_ = kept;
  retired_[slot] = 1;
  ++retired_count_;
  record(DecisionKind::retire, Reason::host_range_quarantined, slot, UINT32_MAX, UINT32_MAX, UINT32_MAX, 0);
  return true;
}

void BudgetManager::hold_history(std::uint32_t slot) noexcept {
  AK_ASSERT(slot < contexts_.size(), "hold_history of a slot outside the budget manager");
  AK_ASSERT(contexts_[slot].running, "a history is held while its context runs, before it leaves");
  held_[slot] = 1;
}

std::uint32_t BudgetManager::reserve_history(std::uint32_t preferred) noexcept {
  const std::uint32_t slot = take_free_slot(preferred);
  held_[slot] = 1;
  ++held_count_;  // neither free nor running: counted with the held histories
  AK_EXPENSIVE_ASSERT(check() == nullptr, "budgets consistent after reserve_history");
  return slot;
}

void BudgetManager::release_history(std::uint32_t slot) noexcept {
  AK_ASSERT(slot < contexts_.size() && held_[slot] != 0, "release_history of a history that is not held");
  held_[slot] = 0;
  if (contexts_[slot].running) return;  // still running: it leaves as usual
  if (retired_[slot] != 0) return;      // retired while held: stays out of use (counted as retired)
  --held_count_;
  free_slots_[free_slot_count_++] = slot;
  admit_from_queue();
  AK_EXPENSIVE_ASSERT(check() == nullptr, "budgets consistent after release_history");
}

void BudgetManager::release_all(std::uint32_t slot, std::uint32_t keep_pages) noexcept {
  ContextState& c = contexts_[slot];
  // Only pages whose bytes are final may stay: a page still landing or quarantined goes, and
  // with it the whole history's device pages (kept simple: the host copy is authoritative).
  const PagePool& pool = arena_.pages();
  for (std::uint32_t l = 0; keep_pages > 0 && l < dense_layers_; ++l) {
    const LayerResidency& r = layer(slot, l);
    if (r.sink_page != page_none && pool.state(r.sink_page) != PageState::owned) keep_pages = 0;
    for (std::uint32_t i = 0; i < r.run_count; ++i) {
      if (pool.state(run_page(slot, l, i)) != PageState::owned) keep_pages = 0;
    }
    for (const std::uint32_t page : promoted_pages(slot, l)) {
      if (pool.state(page) != PageState::owned) keep_pages = 0;
    }
  }
  trim_tables(slot, keep_pages);
  AK_ASSERT(keep_pages > 0 || c.pages_assigned == 0, "every assigned page was in the page tables");
  if (c.pages_assigned > 0) {
    retained_total_ += c.pages_assigned;
    counters_.retained_pages_kept += c.pages_assigned;
    record(DecisionKind::retain, Reason::retained_on_device, slot, UINT32_MAX, UINT32_MAX, UINT32_MAX,
           static_cast<std::uint32_t>(c.pages_assigned));
  }
  reserved_total_ -= c.pages_reserved;
  c.pages_reserved = 0;
  floors_committed_ -= c.budget.floor_pages;
  c.running = false;
  --running_;
  if (held_[slot] != 0) {
    ++held_count_;  // a background reader still reads it: off the free list until release_history
  } else {
    free_slots_[free_slot_count_++] = slot;
  }
  // A context admitted from the queue may finish before anyone took the news.
  std::uint32_t kept = 0;
  for (std::uint32_t i = 0; i < admitted_count_; ++i) {
    if (admitted_[i].handle.slot != slot) admitted_[kept++] = admitted_[i];
  }
  admitted_count_ = kept;
}

void BudgetManager::finish(ContextHandle context, bool retire, std::uint32_t keep_pages) noexcept {
  AK_ASSERT(current(context), "finish of a stale or unknown context handle");
  record(DecisionKind::finish, Reason::finished, context.slot, UINT32_MAX, UINT32_MAX, UINT32_MAX,
         static_cast<std::uint32_t>(contexts_[context.slot].pages_held()));
  release_all(context.slot, retire ? 0 : keep_pages);
  ++counters_.finished;
  if (retire) retire_history(context.slot);  // before the queue can take the slot
  admit_from_queue();
  AK_EXPENSIVE_ASSERT(check() == nullptr, "budgets consistent after finish");
}

void BudgetManager::cancel(ContextHandle context, bool retire) noexcept {
  AK_ASSERT(current(context), "cancel of a stale or unknown context handle");
  record(DecisionKind::cancel, Reason::cancelled, context.slot, UINT32_MAX, UINT32_MAX, UINT32_MAX,
         static_cast<std::uint32_t>(contexts_[context.slot].pages_held()));
  release_all(context.slot);
  ++counters_.cancelled;
  if (retire) retire_history(context.slot);  // before the queue can take the slot
  admit_from_queue();
  AK_EXPENSIVE_ASSERT(check() == nullptr, "budgets consistent after cancel");
}

bool BudgetManager::cancel_queued(std::uint64_t request_id) noexcept {
  for (std::uint32_t i = 0; i < queue_size_; ++i) {
    if (queue_[(queue_head_ + i) % queue_.size()].request_id != request_id) continue;
    for (std::uint32_t j = i; j + 1 < queue_size_; ++j) {
      queue_[(queue_head_ + j) % queue_.size()] = queue_[(queue_head_ + j + 1) % queue_.size()];
    }
    --queue_size_;
    ++counters_.cancelled;
    Decision d;
    d.step = step_;
    d.request_id = request_id;
    d.kind = DecisionKind::cancel;
    d.reason = Reason::cancelled;
    log_.record(d);
    admit_from_queue();  // the new head may fit where the old one did not
    return true;
  }
  return false;
}

void BudgetManager::admit_from_queue() noexcept {
  while (queue_size_ > 0) {
    const Waiting& head = queue_[queue_head_];
    if (free_slot_count_ == 0 || running_ >= running_max_ || !floor_fits(head.budget.floor_pages)) return;  // FIFO: the head blocks
    const Waiting request = head;
    queue_head_ = (queue_head_ + 1) % static_cast<std::uint32_t>(queue_.size());
    --queue_size_;
    const Reason why = pages_unreserved() >= request.budget.floor_pages ? Reason::floor_fits : Reason::floor_fits_after_reclaim;
    const AdmitResult result = admit(request, why, /*adopt=*/false);  // a queued request adopts nothing
    AK_ASSERT(admitted_count_ < admitted_.size(), "admitted-from-queue entries are running contexts: at most the slots");
    admitted_[admitted_count_++] = result;
  }
}

std::uint32_t BudgetManager::take_admitted(std::span<AdmitResult> out) noexcept {
  const std::uint32_t n = std::min<std::uint32_t>(admitted_count_, static_cast<std::uint32_t>(out.size()));
  std::copy_n(admitted_.begin(), n, out.begin());
  std::copy(admitted_.begin() + n, admitted_.begin() + admitted_count_, admitted_.begin());
  admitted_count_ -= n;
  return n;
}

std::uint64_t BudgetManager::grow(ContextHandle context, std::uint64_t pages) noexcept {
  AK_ASSERT(current(context), "grow of a stale or unknown context handle");
  ContextState& c = contexts_[context.slot];
  std::uint64_t granted = 0;
  // To the target, by right: free pages first, then borrowed pages of others.
  if (c.pages_held() < c.budget.target_pages) {
    const std::uint64_t want = std::min(pages, c.budget.target_pages - c.pages_held());
    std::uint64_t from_free = std::min(want, pages_unreserved());
    if (from_free < want) from_free += reclaim(want - from_free, context.slot, /*down_to_floor=*/false);
    from_free = std::min(from_free, pages_unreserved());
    c.pages_reserved += from_free;
    reserved_total_ += from_free;
    granted += from_free;
    counters_.pages_grown += from_free;
    if (from_free > 0) {
      record(DecisionKind::grow, Reason::to_target, context.slot, UINT32_MAX, UINT32_MAX, UINT32_MAX,
             static_cast<std::uint32_t>(from_free));
    }
  }
  // Beyond the target, up to the burst: free pages only — and retained device pages, which only
  // ever hold pages that would be free.
  if (granted < pages && c.pages_held() >= c.budget.target_pages && c.pages_held() < c.budget.burst_pages) {
    const std::uint64_t want = std::min(pages - granted, c.budget.burst_pages - c.pages_held());
    if (pages_unreserved() < want) reclaim_retained(want - pages_unreserved(), context.slot);
    const std::uint64_t borrow =
        std::min({pages - granted, c.budget.burst_pages - c.pages_held(), pages_unreserved()});
    c.pages_reserved += borrow;
    reserved_total_ += borrow;
    granted += borrow;
    counters_.pages_borrowed += borrow;
    if (borrow > 0) {
      record(DecisionKind::borrow, Reason::to_burst, context.slot, UINT32_MAX, UINT32_MAX, UINT32_MAX,
             static_cast<std::uint32_t>(borrow));
    }
  }
  AK_EXPENSIVE_ASSERT(check() == nullptr, "budgets consistent after grow");
  return granted;
}

std::uint64_t BudgetManager::shrink(ContextHandle context, std::uint64_t pages) noexcept {
  AK_ASSERT(current(context), "shrink of a stale or unknown context handle");
  ContextState& c = contexts_[context.slot];
  const std::uint64_t above_floor = c.pages_held() > c.budget.floor_pages ? c.pages_held() - c.budget.floor_pages : 0;
  const std::uint64_t back = std::min({pages, c.pages_reserved, above_floor});
  c.pages_reserved -= back;
  reserved_total_ -= back;
  return back;
}

std::uint64_t BudgetManager::reclaim(std::uint64_t pages, std::uint32_t for_slot, bool down_to_floor) noexcept {
  // Retained histories' device pages first: no running context owns them.
  std::uint64_t freed = reclaim_retained(pages, for_slot);
  if (freed >= pages) return freed;
  // The order is fixed: least recently active first, ties by the lower request id, then slot.
  std::uint32_t victims = 0;
  for (std::uint32_t s = 0; s < contexts_.size(); ++s) {
    if (contexts_[s].running && s != for_slot) order_[victims++] = s;
  }
  std::sort(order_.begin(), order_.begin() + victims, [this](std::uint32_t a, std::uint32_t b) {
    const ContextState& x = contexts_[a];
    const ContextState& y = contexts_[b];
    if (x.last_active_step != y.last_active_step) return x.last_active_step < y.last_active_step;
    if (x.request_id != y.request_id) return x.request_id < y.request_id;
    return a < b;
  });
  for (std::uint32_t i = 0; i < victims && freed < pages; ++i) {
    const ContextState& v = contexts_[order_[i]];
    if (v.pages_held() <= v.budget.target_pages) continue;
    freed += take_from(order_[i], pages - freed, v.budget.target_pages, for_slot, Reason::borrowed_first);
  }
  for (std::uint32_t i = 0; down_to_floor && i < victims && freed < pages; ++i) {
    const ContextState& v = contexts_[order_[i]];
    if (v.pages_held() <= v.budget.floor_pages) continue;
    freed += take_from(order_[i], pages - freed, v.budget.floor_pages, for_slot, Reason::toward_floor);
  }
  return freed;
}

std::uint64_t BudgetManager::take_from(std::uint32_t victim, std::uint64_t pages, std::uint64_t keep_pages,
                                       std::uint32_t for_slot, Reason reason) noexcept {
  ContextState& v = contexts_[victim];
  AK_ASSERT(keep_pages >= v.budget.floor_pages, "invariant 2: reclamation never goes below a floor");
  std::uint64_t taken = 0;
  while (taken < pages && v.pages_held() > keep_pages) {
    if (v.pages_reserved > 0) {
      --v.pages_reserved;
      --reserved_total_;
    } else {
      free_one_assigned(victim, reason, for_slot);
    }
    ++taken;
  }
  if (taken > 0) {
    ++counters_.reclaim_steps;
    counters_.pages_reclaimed += taken;
    record(DecisionKind::reclaim, reason, victim, UINT32_MAX, UINT32_MAX, UINT32_MAX, static_cast<std::uint32_t>(taken),
           for_slot);
  }
  return taken;
}

void BudgetManager::free_one_assigned(std::uint32_t slot, Reason reason, std::uint32_t for_slot) noexcept {
  std::uint32_t best = UINT32_MAX;
  std::uint32_t best_count = 0;
  for (std::uint32_t l = 0; l < dense_layers_; ++l) {
    const std::uint32_t n = evictable(slot, l);
    if (n > best_count) {
      best = l;
      best_count = n;
    }
  }
  // Unreachable while the floor covers the tail (check(): a running context's sink and tail pages
  // are at most its floor): the caller holds more than the floor, all of it assigned.
  AK_ASSERT(best != UINT32_MAX, "a context above its floor has a page that is neither sink nor tail");
  if (layer(slot, best).promoted_count > 0) {
    drop_promoted_lowest(slot, best, DecisionKind::reclaim, reason, for_slot);
  } else {
    drop_run_oldest(slot, best, DecisionKind::reclaim, reason, for_slot);
  }
}

}  // namespace activekv
