// kv_runtime_tier.cpp — the KV runtime's side of the shared tier (docs/TIER.md): lookups, the history
// reserved for one, adoption (the class: kv_runtime_impl.hpp).
//
// A request's lookup may start while it waits in the queue (prefetch_tier: no history yet). At the
// queue head, prepare_tier() reserves a free history for it (BudgetManager::reserve_history: off
// the free list, held like a history the writer reads) and attaches it to the lookup; the tier's
// reader copies the accepted blocks' rows straight into that history's host rows. Invariants:
//   - a reserved history is held (neither free nor running) while the reader may write into it
//     (KvTierPort::writing_into); release_tier_leases() gives it back only once it does not, so a
//     cancel, a head that changed or a shutdown never recycles rows under the reader;
//   - rows past a context's length are invisible: the reader writes only rows no context reads
//     (past the local prefix the history holds), and admission adopts the run the reader accepted
//     — a refused block ends the run before it is written, so it is never adopted;
//   - once the reader is done the history is free again, keeping its rows: admission takes it
//     back only if no context took it since (its generation is the one reserved), else the
//     request prefills as on a miss;
//   - window layers and hybrids (docs/TIER.md, "Window layers and hybrids"): the run adopted ends
//     where every window layer's rows of the next query's window and (hybrids) the state came with
//     it — the reader cut it there (tier_chain_cut) — and the cut is counted, logged and explained
//     (note_tier_cuts); the window rows land in the rings at adoption, after admission's own ring
//     copies, and the state at the end becomes the history's only checkpoint, restored into the
//     context's recurrent slot by open_context. The lookup starts past the local prefix admission
//     will adopt (adoptable_prefix: rings and checkpoints applied), so admission finds it;
//   - written while running (window-layer models, offer_running): a block goes to the writer when
//     the history's length has just reached its end, between steps, so every row of it is final on
//     the host and its rings still hold the rows; the writer copies the ring rows before the call
//     returns and reads the full layers' rows under the history's lease, which leave() turns into
//     a held history if the context goes first. tier_offered_blocks_ says which blocks are done.
#include "runtime/kv_runtime_impl.hpp"

namespace activekv::runtime_impl {

bool KvRuntimeImpl::tier_blocks(std::span<const std::int32_t> prompt, std::uint32_t reused, std::uint32_t& first,
                                std::uint32_t& end) const noexcept {
  const std::uint32_t B = tier_->block_tokens();
  AK_ASSERT(B > 0 && B % plan_.arena.page_tokens == 0, "kv tier: a block is a whole number of pages");
  if (prompt.size() <= B) return false;
  end = static_cast<std::uint32_t>(std::min<std::size_t>((prompt.size() - 1) / B, plan_.host.max_context_tokens / B));
  first = reused / B;
  return end > first && std::uint64_t{end} * B > reused;
}

std::uint32_t KvRuntimeImpl::tier_history_views(std::uint32_t slot) noexcept {
  const std::span<const std::byte> host = backend_.host_pool();
  for (std::uint32_t l = 0; l < plan_.geometry.dense_layers; ++l) {
    tier_csegments_[l] = host.subspan(plan_.host.segment_offset(slot, l), plan_.host.layer_bytes(l));  // a ring for a window layer
  }
  // A hybrid's checkpoints (every position names bytes that arrived): a block ending at one carries it.
  std::uint32_t states = 0;
  for (std::uint32_t i = 0; i < plan_.state.checkpoints; ++i) {
    const std::uint32_t p = checkpoint_pos_[std::size_t{slot} * plan_.state.checkpoints + i];
    if (p != UINT32_MAX && p != 0) tier_states_[states++] = TierState{p, host.data() + plan_.state.checkpoint_offset(slot, i)};
  }
  return states;
}

// Window-layer models: the blocks whose ends the history crossed since admission or the last call
// go to the writer now, while the rings hold their rows (docs/TIER.md, "Written while running").
// A model without window layers writes whole blocks at finish, so it offers nothing here; a hybrid's
// blocks carry the states of its K-page checkpoints, which stay until the history is reused.
void KvRuntimeImpl::offer_running(ContextId context, std::span<const std::int32_t> tokens) {
  AK_ASSERT(!step_open_, "kv runtime: offer_running() during a step");
  AK_ASSERT(budgets_.current(context), "kv runtime: offer_running() of a context that is not running");
  if (tier_ == nullptr || plan_.host.ring_tokens == 0) return;
  const std::uint32_t slot = context.slot;
  const std::uint32_t B = tier_->block_tokens();
  // Rows below the length are final on the host once the step that wrote them ended.
  const std::uint32_t length = budgets_.context(slot).length_tokens;
  const auto usable = static_cast<std::uint32_t>(std::min<std::size_t>(tokens.size(), length));
  const std::uint32_t blocks = usable / B;
  if (blocks <= tier_offered_blocks_[slot]) return;
  const std::uint32_t first = tier_offered_blocks_[slot];
  tier_offered_blocks_[slot] = blocks;
  if (history_quarantined(slot) || slot_faulted_[slot] != 0) return;
  const std::uint32_t states = tier_history_views(slot);
  tier_->offer_running(tokens.first(std::size_t{blocks} * B), length, first, tier_csegments_,
                       std::span<const TierState>(tier_states_.data(), states), slot);
  ++counters_.tier_running_offers;
}

std::uint32_t KvRuntimeImpl::release_tier_leases() {
  if (tier_ == nullptr || budgets_.histories_held() == 0) return 0;
  bool released = false;
  for (std::uint32_t slot = 0; slot < budgets_.slots(); ++slot) {
    if (budgets_.history_held(slot) && !budgets_.context(slot).running && !tier_->lease_held(slot) &&
        !tier_->writing_into(slot)) {
      budgets_.release_history(slot);  // may admit a queued request into it
      released = true;
    }
  }
  if (released) sweep_retained();  // a retained prefix in a history just taken is dropped
  return budgets_.histories_held();
}

bool KvRuntimeImpl::prefetch_tier(std::span<const std::int32_t> prompt) {
  if (tier_ == nullptr) return true;
  std::uint32_t first = 0, end = 0;
  // The host levels first (retained histories, then the prefix cache): the tier is asked for the rest.
  if (!tier_blocks(prompt, host_prefix_tokens(prompt, adoptable_prefix(prompt)), first, end)) return true;
  return tier_->lookup(prompt, first, end, /*evict=*/false) != TierLookupStatus::busy;
}

void KvRuntimeImpl::drop_tier(std::span<const std::int32_t> prompt) {
  if (tier_ == nullptr) return;
  std::uint32_t first = 0, end = 0;
  if (!tier_blocks(prompt, 0, first, end)) return;
  tier_->abandon(prompt, end);
  release_tier_leases();  // a reserved history the reader is out of goes back now, else later
}

bool KvRuntimeImpl::prepare_tier(std::span<const std::int32_t> prompt) {
  if (tier_ == nullptr) return true;
  release_tier_leases();
  bool in_place = false;
  const runtime::PrefixMatch match = adoptable_prefix(prompt, &in_place);
  const std::uint32_t reused = host_prefix_tokens(prompt, match);
  std::uint32_t first = 0, end = 0;
  if (!tier_blocks(prompt, reused, first, end)) return true;
  switch (tier_->lookup(prompt, first, end, /*evict=*/true)) {
    case TierLookupStatus::busy:
    case TierLookupStatus::writing: return false;
    case TierLookupStatus::ready:
      release_tier_leases();  // the reader may have finished since the call above
      return true;
    case TierLookupStatus::reading:
    case TierLookupStatus::read: break;
  }
  // No history yet: reserve one now, so the reader writes the rows there as soon as it has them.
  // Without a free history admission waits anyway (the read is kept); with requests queued in the
  // budget manager this one would queue behind them: no reservation, it prefills.
  if (budgets_.histories_free() == 0 || budgets_.queued() > 0) return true;
  const std::uint32_t slot = budgets_.reserve_history(in_place ? match.slot : UINT32_MAX);
  // The reader writes past `reused` only; a retained prefix of another prompt in this history is
  // given up now (its rows are about to change), the one in place stays (rows below `reused`).
  if (!(in_place && slot == match.slot)) drop_retained(slot, Reason::retained_lru);
  const std::span<std::byte> host = backend_.host_pool();
  for (std::uint32_t l = 0; l < plan_.geometry.dense_layers; ++l) {
    tier_segments_[l] = host.subspan(plan_.host.segment_offset(slot, l), plan_.host.layer_bytes(l));  // a ring for a window layer
  }
  tier_generation_[slot] = budgets_.context(slot).generation;
  if (!tier_->attach(prompt, first, end, tier_segments_, reused, slot)) {
    budgets_.release_history(slot);  // nothing was written into it
    return false;
  }
  ++counters_.tier_reservations;
  return false;
}

std::uint32_t KvRuntimeImpl::tier_ready_history(std::span<const std::int32_t> prompt, std::uint32_t reused) noexcept {
  std::uint32_t first = 0, end = 0, from = 0;
  if (!tier_blocks(prompt, reused, first, end)) return UINT32_MAX;
  const std::uint32_t slot = tier_->ready_slot(prompt, first, end, from);
  if (slot == kTierNoSlot) return UINT32_MAX;
  // Still free and untouched since the reserve (no context took it), and written from a token the
  // local prefix reaches (rows below `from` come from the host pool's own prefix).
  const bool intact = slot < budgets_.slots() && !budgets_.context(slot).running && !budgets_.history_held(slot) &&
                      !budgets_.history_retired(slot) && budgets_.context(slot).generation == tier_generation_[slot] &&
                      from <= reused;
  if (intact) return slot;
  tier_->abandon(prompt, end);
  ++counters_.tier_reservations_lost;
  return UINT32_MAX;
}

// The shared tier (docs/TIER.md): the prompt's whole blocks past the `reused` tokens the host pool
// gave, while at least one prompt token is left to prefill. The rows are already in the history
// (the tier's reader wrote them into `tier_slot`, reserved for this request): only the length moves.
std::uint32_t KvRuntimeImpl::restore_from_tier(std::uint32_t slot, std::span<const std::int32_t> prompt,
                                               std::uint32_t reused, std::uint32_t tier_slot) noexcept {
  const std::uint32_t B = tier_->block_tokens();
  const std::uint32_t P = plan_.arena.page_tokens;
  std::uint32_t first_block = 0, blocks_end = 0;
  if (!tier_blocks(prompt, reused, first_block, blocks_end)) return reused;
  // Not admitted into the history the reader wrote, or pages still landing by a device-to-device
  // copy (they end the run at the adopted prefix and cannot be given up before their fence): the
  // tier's rows are not used this time (the rest prefills) and the lookup is let go.
  if (slot != tier_slot || adoption_[slot].device_copied > 0) {
    tier_->abandon(prompt, blocks_end);
    return reused;
  }
  // A hybrid's state at the restored end lands in this history's newest checkpoint (copied by the
  // port only when the run is not empty, so a retained prefix's checkpoints stay when nothing is restored).
  const std::span<std::byte> state =
      plan_.state.enabled() && plan_.state.checkpoints != 0
          ? backend_.host_pool().subspan(plan_.state.checkpoint_offset(slot, StatePlan::latest), plan_.state.state_bytes)
          : std::span<std::byte>{};
  TierAdoptCut cut;
  const std::uint32_t end = tier_->adopt(prompt, first_block, blocks_end, state, cut);
  AK_ASSERT(end >= first_block && end <= blocks_end, "kv tier: a restore ends inside the blocks asked for");
  AK_ASSERT(cut.end == end && end <= cut.window_end && cut.window_end <= cut.accepted_end, "kv tier: cuts only shorten the run");
  note_tier_cuts(slot, cut, reused);
  const std::uint32_t length = end * B;
  if (length <= reused) return reused;
  AK_ASSERT(!plan_.state.enabled() || !state.empty(), "kv tier: a hybrid restores only with a checkpoint to land its state in");
  if (plan_.state.enabled()) {
    // The tier's state at the restored end becomes the history's only checkpoint (older ones belong
    // to the history's previous prefix, or lie below it): restore_state reads it into the slot.
    drop_checkpoints(slot, 0);
    checkpoint_pos_[std::size_t{slot} * plan_.state.checkpoints + StatePlan::latest] = length;
  }
  // Device pages handed over in place end at the local prefix; the history now ends past them, and
  // a run is contiguous up to its tail: the run's pages give way (logged), the sink and promoted stay.
  const std::uint32_t given_up = budgets_.release_runs(slot, Reason::run_behind_tier);
  adoption_[slot].device_pages -= std::min(adoption_[slot].device_pages, given_up);
  budgets_.start_at(ContextHandle{slot, budgets_.context(slot).generation}, length);
  adoption_[slot].tier_pages_first = reused / P;
  adoption_[slot].tier_pages_end = length / P;
  ++counters_.tier_restores;
  counters_.tier_restored_tokens += length - reused;
  return length;
}

// The cuts (docs/TIER.md, "Cuts"): accepted blocks past the restored end, counted, logged and
// explained like the prefix cache's. Only blocks past what the host already gave count.
void KvRuntimeImpl::note_tier_cuts(std::uint32_t slot, const TierAdoptCut& cut, std::uint32_t reused) noexcept {
  const std::uint32_t B = tier_->block_tokens();
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint32_t floor = std::max(reused, cut.end * B);
  adoption_[slot].tier_ring_cut = 0;
  adoption_[slot].tier_state_cut = 0;
  if (cut.accepted_end * B > std::max(floor, cut.window_end * B)) {
    const std::uint32_t tokens = cut.accepted_end * B - std::max(floor, cut.window_end * B);
    ++counters_.tier_ring_cuts;
    counters_.tier_ring_cut_tokens += tokens;
    adoption_[slot].tier_ring_cut = tokens / P;
    record_prefix(DecisionKind::adopt, Reason::tier_ring_cut, slot, tokens / P);
  }
  if (cut.window_end * B > floor) {
    const std::uint32_t tokens = cut.window_end * B - floor;
    ++counters_.tier_state_cuts;
    counters_.tier_state_cut_tokens += tokens;
    adoption_[slot].tier_state_cut = tokens / P;
    record_prefix(DecisionKind::adopt, Reason::tier_state_cut, slot, tokens / P);
  }
}

}  // namespace activekv::runtime_impl
