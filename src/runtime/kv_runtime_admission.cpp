// kv_runtime_admission.cpp — admission, leaving, and reading a context (the class: kv_runtime_impl.hpp).
#include "runtime/kv_runtime_impl.hpp"

#include <cstring>

namespace activekv::runtime_impl {

// ---------------------------------------------------------------------------
// Admission
// ---------------------------------------------------------------------------

Result<AdmitResult> KvRuntimeImpl::open_context(std::uint64_t request_id, std::uint32_t tokens_max,
                                                std::span<const std::int32_t> prompt, std::uint32_t& reused_tokens) {
  reused_tokens = 0;
  if (Status s = budgets_.check_request(tokens_max); !s.ok()) return s.error();
  if (tier_ != nullptr) release_tier_leases();
  runtime::PrefixMatch match = local_prefix(prompt);
  match = clamp_to_rings(match);
  // In place only when the prompt takes the whole retained prefix (a conversation's follow-up):
  // adopting a shorter part in place would cut the rest of that history. Otherwise admission takes
  // another free history and the matched pages are copied (from a free or a running history).
  bool in_place =
      match.pages > 0 && !budgets_.context(match.slot).running && match.pages == prefix_->pages(match.slot);
  // A hybrid model adopts only up to a state checkpoint (kv_runtime_state.cpp); the retained
  // device pages go along only when the whole prefix is taken.
  match = clamp_to_checkpoint(match);
  in_place = in_place && match.pages > 0;
  const bool adopt_device = in_place && match.pages == prefix_->pages(match.slot) && settings_.prefix_reuse_device;
  // A copy whose source holds fewer pages than the host prefix cache (a shared template page held by
  // a running context) gives way to the cache, which then supplies the whole prefix: a copy on adopt
  // with its device-to-device part in flight would end the adoption at the shorter match.
  if (!in_place && match.pages > 0 && cache_ != nullptr && cache_prefix_pages(prompt) > match.pages) {
    match = runtime::PrefixMatch{};
  }
  // A history the tier's reader wrote this prompt's blocks into is taken instead (kv_runtime_tier.cpp).
  const std::uint32_t tier_slot =
      tier_ != nullptr ? tier_ready_history(prompt, host_prefix_tokens(prompt, match)) : UINT32_MAX;
  const std::uint32_t preferred = tier_slot != UINT32_MAX ? tier_slot : in_place ? match.slot : UINT32_MAX;
  const AdmitResult result = budgets_.submit(request_id, tokens_max, nullptr, preferred,
                                             /*adopt=*/adopt_device && preferred == match.slot);
  if (result.outcome == AdmitOutcome::refused && result.reason == Reason::no_usable_history) {
    return make_error(ErrorCode::backend, "device", fmt::format("request {} refused: {}", request_id, reason_text(result.reason)));
  }
  if (result.outcome == AdmitOutcome::refused) {
    return make_error(ErrorCode::exhausted, "--queue-max",
                      fmt::format("request {} refused: {}", request_id, reason_text(result.reason)));
  }
  if (result.outcome == AdmitOutcome::admitted) {
    slot_faulted_[result.handle.slot] = 0;
    reused_tokens = settle_admission(result.handle, match, result.pages_adopted);
    const std::uint32_t local_tokens = reused_tokens;
    if (cache_ != nullptr) reused_tokens = restore_from_cache(result.handle.slot, prompt, reused_tokens);
    if (tier_ != nullptr) reused_tokens = restore_from_tier(result.handle.slot, prompt, reused_tokens, tier_slot);
    // Blocks below the adopted length are another history's (they were, or will be, offered there).
    if (tier_ != nullptr) tier_offered_blocks_[result.handle.slot] = reused_tokens / tier_->block_tokens();
    // Pages from the cache or the tier came with the state at their end, put into this history's checkpoints.
    const std::uint32_t state_from = reused_tokens != local_tokens ? result.handle.slot : match.slot;
    if (cache_ != nullptr) reused_tokens = adopt_partial_page(result.handle, prompt, reused_tokens);
    if (plan_.state.enabled()) {
      bind_state(result.handle);
      if (reused_tokens == 0) drop_checkpoints(result.handle.slot, 0);
      if (!restore_state(result.handle, state_from, reused_tokens)) slot_faulted_[result.handle.slot] = 1;
      note_prompt(result.handle, static_cast<std::uint32_t>(prompt.size()));
    }
  }
  return result;
}

// The longest retained prefix, leaving at least one prompt token to prefill (its logits).
runtime::PrefixMatch KvRuntimeImpl::local_prefix(std::span<const std::int32_t> prompt) const noexcept {
  runtime::PrefixMatch match;
  if (prefix_ != nullptr && prompt.size() > plan_.arena.page_tokens) {
    const auto pages_max = static_cast<std::uint32_t>((prompt.size() - 1) / plan_.arena.page_tokens);
    match = prefix_->longest(prompt, pages_max);
  }
  return match;
}

// Window layers keep a ring on the host (memory_plan.hpp): the next query after a match at M
// reads that layer's pages from first_page_seen(M) on, so the source history's rings must still
// hold them. A match they do not cover is recomputed (counted, logged), never read from
// overwritten ring slots. A retained history may hold a partial page past its prefix.
runtime::PrefixMatch KvRuntimeImpl::clamp_to_rings(runtime::PrefixMatch match) noexcept {
  if (rings_cover(match)) return match;
  ++counters_.prefix_ring_recomputed;
  record_prefix(DecisionKind::drop_retained, Reason::ring_not_covering, match.slot, match.pages);
  return runtime::PrefixMatch{};
}

bool KvRuntimeImpl::rings_cover(runtime::PrefixMatch match) const noexcept {
  if (match.pages == 0 || plan_.host.ring_tokens == 0) return true;
  const std::uint32_t P = plan_.arena.page_tokens;
  const ContextState& source = budgets_.context(match.slot);
  const std::uint64_t written_end = source.running ? std::uint64_t{source.length_tokens}
                                                   : (std::uint64_t{prefix_->pages(match.slot)} + 1) * P;
  const std::uint32_t M = match.pages * P;
  std::uint32_t first_needed = UINT32_MAX;
  for (std::uint32_t l = 0; l < plan_.geometry.dense_layers; ++l) {
    if (plan_.host.is_ring(l)) first_needed = std::min(first_needed, plan_.host.first_page_seen(l, M, P) * P);
  }
  return written_end <= first_needed || written_end - first_needed <= plan_.host.ring_tokens;
}

// The local match admission will adopt (clamp_to_rings, then clamp_to_checkpoint), without
// counting or logging: where the tier's lookup starts, so admission finds it (kv_runtime_tier.cpp).
// `in_place`: whether open_context would adopt it in place (the whole retained prefix, not running).
runtime::PrefixMatch KvRuntimeImpl::adoptable_prefix(std::span<const std::int32_t> prompt, bool* in_place) const noexcept {
  runtime::PrefixMatch match = local_prefix(prompt);
  if (!rings_cover(match)) match = runtime::PrefixMatch{};
  if (in_place != nullptr) {
    *in_place = match.pages > 0 && !budgets_.context(match.slot).running && match.pages == prefix_->pages(match.slot);
  }
  if (plan_.state.enabled() && match.pages > 0) match.pages = checkpoint_before(match.slot, match.pages * plan_.arena.page_tokens, nullptr) / plan_.arena.page_tokens;
  if (in_place != nullptr) *in_place = *in_place && match.pages > 0;
  return match;
}

std::uint32_t KvRuntimeImpl::take_admitted(std::span<AdmitResult> out) {
  const std::uint32_t n = budgets_.take_admitted(out);
  for (std::uint32_t i = 0; i < n; ++i) {
    slot_faulted_[out[i].handle.slot] = 0;
    adoption_[out[i].handle.slot] = Adoption{};  // admitted from the queue: adopts nothing
    tier_offered_blocks_[out[i].handle.slot] = 0;
    bind_state(out[i].handle);
    drop_checkpoints(out[i].handle.slot, 0);
  }
  return n;
}

// ---------------------------------------------------------------------------
// Prefix reuse: retain, adopt, drop (docs/PREFIX.md)
// ---------------------------------------------------------------------------

void KvRuntimeImpl::sync_retained_counters() noexcept {
  const BudgetCounters& b = budgets_.counters();
  counters_.retained_device_pages_kept = b.retained_pages_kept;
  counters_.retained_device_pages_adopted = b.retained_pages_adopted;
  counters_.retained_device_pages_reclaimed = b.retained_pages_reclaimed;
  counters_.retained_device_pages = budgets_.retained_pages_total();
  counters_.pages_reclaimed = b.pages_reclaimed;
  counters_.reclaim_steps = b.reclaim_steps;
}

std::uint32_t KvRuntimeImpl::settle_admission(ContextId context, runtime::PrefixMatch match,
                                              std::uint32_t device_pages) noexcept {
  const std::uint32_t slot = context.slot;
  adoption_[slot] = Adoption{};
  sync_retained_counters();
  if (prefix_ == nullptr) return 0;
  const std::uint32_t P = plan_.arena.page_tokens;
  ContextState& c = budgets_.context(slot);
  if (match.pages > 0 && match.slot == slot) {
    // In place: the history already holds the rows; the context starts after them and will
    // rewrite what lies beyond, so the index keeps only the adopted pages. A longer retained
    // prefix is taken in place only when no other history was free: the pages beyond the match
    // are given up like a dropped history (counted, logged).
    if (prefix_->pages(slot) > match.pages) {
      record_prefix(DecisionKind::drop_retained, Reason::retained_lru, slot, prefix_->pages(slot) - match.pages);
      ++counters_.retained_dropped;
    }
    prefix_->truncate(slot, match.pages);
    retained_generation_[slot] = context.generation;
    // The retained device pages (if the budget manager handed them over) hold logical pages below
    // the prefix's end only; the new context starts at match.pages × P, so they are its history.
    AK_ASSERT(prefix_->pages(slot) == match.pages || device_pages == 0, "device pages are handed over only in full");
    adoption_[slot] = Adoption{match.pages, false, retained_request_[slot], device_pages};
    record_prefix(DecisionKind::adopt, Reason::prefix_adopted, slot, match.pages);
  } else {
    if (prefix_->pages(slot) > 0) drop_retained(slot, Reason::retained_lru);
    if (match.pages > 0) {
      // Copy on adopt: another history holds the prefix (a running context, or a retained history
      // that holds more than the prompt shares). Its rows below the match never change, so they are
      // copied into this history (host to host, between steps: no copy is in flight).
      AK_ASSERT(prefix_->pages(match.slot) >= match.pages, "a copied prefix is still retained");
      AK_ASSERT(!budgets_.context(match.slot).running || match.pages * P <= budgets_.context(match.slot).length_tokens,
                "a copied prefix was written");
      const std::span<std::byte> host = backend_.host_pool();
      const std::size_t bytes = std::size_t{match.pages} * P * plan_.host.row_bytes;
      for (std::uint32_t l = 0; l < plan_.geometry.dense_layers; ++l) {
        // A window layer's ring is copied whole: slot t mod ring_tokens is the same in both histories.
        std::memcpy(host.data() + plan_.host.row_offset(slot, l, 0), host.data() + plan_.host.row_offset(match.slot, l, 0),
                    plan_.host.is_ring(l) ? plan_.host.ring_bytes : bytes);
      }
      adoption_[slot] = Adoption{match.pages, true, retained_request_[match.slot]};
      ++counters_.prefix_copies;
      record_prefix(DecisionKind::adopt, Reason::prefix_copied, slot, match.pages, match.slot);
      // The host rows are the authority; the pages the source holds on the device are copied there
      // too (device_retention.cpp), so they are not staged from the host again.
      adoption_[slot].device_copied = copy_prefix_on_device(context, match.slot, match.pages);
    }
  }
  if (match.pages == 0) return 0;
  // It starts after the adopted rows: every page it took over or had copied lies below its tail.
  budgets_.start_at(context, match.pages * P);
  retained_request_[slot] = retained_request_[match.slot];
  ++counters_.prefix_adoptions;
  counters_.prefix_reused_tokens += c.length_tokens;
  prefix_->touch(match.slot, ++retain_stamp_);
  counters_.retained_histories = prefix_->histories_held();
  return c.length_tokens;
}

void KvRuntimeImpl::drop_retained(std::uint32_t slot, Reason reason) noexcept {
  if (prefix_ == nullptr || prefix_->pages(slot) == 0) return;
  record_prefix(DecisionKind::drop_retained, reason, slot, prefix_->pages(slot));
  prefix_->drop(slot);
  // Without its index entry the history's device pages are of no use: back to the pool.
  budgets_.release_retained(slot, reason);
  sync_retained_counters();
  budgets_.set_retained(slot, 0);
  ++counters_.retained_dropped;
  counters_.retained_histories = prefix_->histories_held();
}

void KvRuntimeImpl::sweep_retained() noexcept {
  if (prefix_ == nullptr) return;
  for (std::uint32_t slot = 0; slot < budgets_.slots(); ++slot) {
    if (prefix_->pages(slot) == 0) continue;
    const ContextState& c = budgets_.context(slot);
    if (c.generation != retained_generation_[slot] || budgets_.history_retired(slot)) {
      drop_retained(slot, budgets_.history_retired(slot) ? Reason::retained_cancelled : Reason::retained_lru);
    }
  }
}

void KvRuntimeImpl::record_prefix(DecisionKind kind, Reason reason, std::uint32_t slot, std::uint32_t pages,
                                  std::uint32_t other_slot) noexcept {
  Decision d;
  d.step = planner_.step();
  d.request_id = budgets_.context(slot).request_id;
  d.slot = slot;
  d.pages = pages;
  d.other_slot = other_slot;
  d.kind = kind;
  d.reason = reason;
  log_.record(d);
}

void KvRuntimeImpl::finish_retaining(ContextId context, std::span<const std::int32_t> tokens) {
  AK_ASSERT(!step_open_, "kv runtime: finish_retaining() during a step; use cancel()");
  AK_ASSERT(budgets_.current(context), "kv runtime: finish_retaining() of a context that is not running");
  const std::uint32_t slot = context.slot;
  const std::uint32_t length = budgets_.context(slot).length_tokens;
  const std::size_t usable = std::min<std::size_t>(tokens.size(), length);
  if (tier_ != nullptr && !history_quarantined(slot) && slot_faulted_[slot] == 0) {
    const std::uint32_t states = tier_history_views(slot);
    tier_->offer(tokens.first(usable), length, tier_csegments_, std::span<const TierState>(tier_states_.data(), states), slot);
    // The writer reads these rows after this returns: the history stays off the free list until
    // it has (release_tier_leases), so no admission can write into it meanwhile.
    if (tier_->lease_held(slot)) {
      budgets_.hold_history(slot);
      ++counters_.tier_leases;
    }
  }
  if (prefix_ == nullptr || usable < plan_.arena.page_tokens || history_quarantined(slot) || slot_faulted_[slot] != 0) {
    leave(context, /*finished=*/true);
    return;
  }
  offer_to_cache(slot, tokens.first(usable));
  // The state stays on the host as the history's checkpoints (the newest page boundary it reached
  // was written back at that step's end); the device slot goes back to the pool.
  release_state(slot);
  // Indexed before the history is freed: an admission from the queue inside finish() then sees it
  // as retained and prefers another free history.
  prefix_->retain(slot, tokens.first(usable), ++retain_stamp_);
  budgets_.set_retained(slot, retain_stamp_);
  retained_generation_[slot] = context.generation;
  retained_request_[slot] = budgets_.context(slot).request_id;
  ++counters_.retained_kept;
  counters_.retained_histories = prefix_->histories_held();
  record_prefix(DecisionKind::retain, Reason::prefix_retained, slot, prefix_->pages(slot));
  policy_->forget(slot);
  budgets_.finish(context, /*retire=*/false, settings_.prefix_reuse_device ? prefix_->pages(slot) : 0);
  slot_faulted_[slot] = 0;
  sweep_retained();
  sync_retained_counters();
}

void KvRuntimeImpl::finish(ContextId context) {
  AK_ASSERT(!step_open_, "kv runtime: finish() during a step; use cancel()");
  AK_ASSERT(budgets_.current(context), "kv runtime: finish() of a context that is not running");
  leave(context, /*finished=*/true);
}

void KvRuntimeImpl::cancel(ContextId context) {
  if (!budgets_.current(context)) return;  // already gone: cancel is idempotent
  if (step_open_) {
    AK_ASSERT(deferred_cancel_count_ < deferred_cancels_.size(), "kv runtime: deferred cancels overflow");
    deferred_cancels_[deferred_cancel_count_++] = context;
    return;
  }
  leave(context, /*finished=*/false);
}

void KvRuntimeImpl::leave(ContextId context, bool finished) noexcept {
  // Blocks offered while it ran may still be read by the tier's writer: the history stays off the
  // free list until they are written (release_tier_leases).
  if (tier_ != nullptr && !budgets_.history_held(context.slot) && tier_->lease_held(context.slot)) {
    budgets_.hold_history(context.slot);
    ++counters_.tier_leases;
  }
  policy_->forget(context.slot);
  // Without finish_retaining() the history is emptied: a prefix it held in place goes too.
  drop_retained(context.slot, Reason::retained_cancelled);
  const bool retire = history_quarantined(context.slot);
  release_state(context.slot);
  if (finished) budgets_.finish(context, retire); else budgets_.cancel(context, retire);
  if (retire) ++counters_.histories_retired;
  slot_faulted_[context.slot] = 0;
  sweep_retained();
}

void KvRuntimeImpl::apply_deferred_cancels() noexcept {
  AK_ASSERT(!step_open_, "kv runtime: deferred cancels apply once the step is closed");
  for (std::uint32_t i = 0; i < deferred_cancel_count_; ++i) cancel(deferred_cancels_[i]);
  deferred_cancel_count_ = 0;
}

bool KvRuntimeImpl::history_quarantined(std::uint32_t slot) const noexcept {
  return tickets_.range_quarantined(plan_.host.segment_offset(slot, 0), plan_.host.history_bytes) ||
         (plan_.state.enabled() &&
          tickets_.range_quarantined(plan_.state.history_offset(slot), plan_.state.bytes_per_history));
}

std::uint32_t KvRuntimeImpl::length(ContextId context) const {
  AK_ASSERT(budgets_.current(context), "kv runtime: length() of a context that is not running");
  return budgets_.context(context.slot).length_tokens;
}

bool KvRuntimeImpl::faulted(ContextId context) const {
  return budgets_.current(context) && slot_faulted_[context.slot] != 0;
}

std::span<const std::byte> KvRuntimeImpl::host_row(ContextId context, std::uint32_t layer, std::uint32_t token) const {
  AK_ASSERT(budgets_.current(context), "kv runtime: host_row() of a context that is not running");
  AK_ASSERT(layer < plan_.geometry.dense_layers, "kv runtime: host_row() layer out of range");
  AK_ASSERT(token < budgets_.context(context.slot).length_tokens, "kv runtime: host_row() token not written");
  AK_ASSERT(plan_.host.holds(layer, budgets_.context(context.slot).length_tokens, token),
            "kv runtime: host_row() of a window layer's token its ring no longer holds");
  const std::uint64_t offset = plan_.host.row_offset(context.slot, layer, token);
  return backend_.host_pool().subspan(offset, plan_.host.row_bytes);
}

Explanation KvRuntimeImpl::explain(ContextId context) const {
  Explanation e = activekv::explain(budgets_, context, planner_.step());
  const Adoption& a = adoption_[context.slot];
  e.adopted_pages = a.pages;
  e.adopted_copied = a.copied;
  e.adopted_from_request = a.from_request;
  e.tier_pages_first = a.tier_pages_first;
  e.tier_pages_end = a.tier_pages_end;
  e.cache_pages_first = a.cache_pages_first;
  e.cache_pages_end = a.cache_pages_end;
  e.cache_shared_prefixes = a.cache_shared;
  e.cache_partial_rows = a.cache_partial_rows;
  e.cache_ring_cut_pages = a.cache_ring_cut;
  e.cache_state_cut_pages = a.cache_state_cut;
  e.tier_ring_cut_pages = a.tier_ring_cut;
  e.tier_state_cut_pages = a.tier_state_cut;
  e.adopted_device_pages = a.device_pages;
  e.adopted_device_copied = a.device_copied;
  e.adopted_device_promoted = a.device_promoted;
  const std::uint64_t adopted_all = std::uint64_t{a.pages} * plan_.geometry.dense_layers;
  const std::uint64_t on_device = std::uint64_t{a.device_pages} + a.device_copied;
  e.adopted_host_pages = adopted_all > on_device ? adopted_all - on_device : 0;
  e.staged_in_place = settings_.read_in_place;
  explain_state(context, e);
  explain_sparse(context, e);
  return e;
}

const char* KvRuntimeImpl::check() const {
  if (const char* broken = budgets_.check()) return broken;
  if (const char* broken = check_state()) return broken;
  if (prefix_ != nullptr) {
    if (const char* broken = prefix_->check()) return broken;
    for (std::uint32_t slot = 0; slot < budgets_.slots(); ++slot) {
      if (prefix_->pages(slot) == 0) continue;
      const ContextState& c = budgets_.context(slot);
      if (c.generation != retained_generation_[slot]) return "prefix reuse: a retained prefix in a history another context took";
      if (c.running && prefix_->pages(slot) * plan_.arena.page_tokens > c.length_tokens) {
        return "prefix reuse: a running context's retained pages exceed its length";
      }
      if (budgets_.history_retired(slot)) return "prefix reuse: a retired history still indexed";
    }
    // Retained device pages belong to a free history whose prefix is indexed, below its end.
    for (std::uint32_t slot = 0; slot < budgets_.slots(); ++slot) {
      if (budgets_.retained_pages(slot) == 0) continue;
      if (!settings_.prefix_reuse_device) return "prefix reuse: device pages retained with device retention off";
      if (prefix_->pages(slot) == 0) return "prefix reuse: retained device pages without a retained prefix";
      for (std::uint32_t l = 0; l < plan_.geometry.dense_layers; ++l) {
        const LayerResidency& r = budgets_.layer(slot, l);
        if (r.run_count > 0 && r.run_first + r.run_count > prefix_->pages(slot)) {
          return "prefix reuse: a retained device page lies beyond the retained prefix";
        }
        const auto logicals = budgets_.promoted_logical(slot, l);
        if (r.promoted_count > 0 && logicals[r.promoted_count - 1] >= prefix_->pages(slot)) {
          return "prefix reuse: a retained promoted page lies beyond the retained prefix";
        }
      }
    }
  } else if (budgets_.retained_pages_total() != 0) {
    return "prefix reuse: device pages retained with reuse off";
  }
  if (cache_ != nullptr && cache_->pages_used() != counters_.prefix_cache_pages) {
    return "prefix cache: the pages counter disagrees with the cache";
  }
  if (!leases_.validate()) return "staging leases: counts, free list or fences disagree";
  if (!tickets_.validate()) return "copy tickets: counts or fences disagree";
  if (backend_.stats().device_allocations != device_allocations_baseline_) return "invariant 7: a device allocation after warm-up";
  return nullptr;
}

}  // namespace activekv::runtime_impl
