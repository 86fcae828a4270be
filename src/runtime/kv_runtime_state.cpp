// kv_runtime_state.cpp — recurrent state: slots bound per running context, checkpoints, restores
// (the class: kv_runtime_impl.hpp; the plan: state_plan.hpp; docs/RUNTIME.md "Recurrent state").
//
// The picture. A hybrid model's recurrent layers hold one state per context, fixed in size. The
// running context's state lives in a recurrent slot of the arena (a part of its own, never pages),
// bound at admission from a free stack and zeroed, or filled from a checkpoint when the context
// adopted a prefix. The forward pass updates it in place through recurrent_state(). At the end of
// every step whose new length is a whole number of pages, the state is copied device to host into
// one of its history's checkpoints, under a write ticket on the host range and a fence, exactly as
// the rows are written back: so the host always holds the state at the newest page boundary the
// context reached (what it leaves with), at the prompt's last whole page, and every K pages.
//
// The invariant. A checkpoint's position is set only after its copy's fence signalled, and cleared
// before a copy overwrites it; so every position in checkpoint_pos_ names bytes that arrived. An
// adoption lands only on such a position (clamp_to_checkpoint), so an adopted context's rows and
// state describe the same prefix. Slots: free + bound = device_slots, always (check()).
//
// Backends: the forward pass runs on the host and reads the state in place, so the arena must be
// host-visible (Capabilities::host_visible_arena). Elsewhere a hybrid geometry is refused at
// create(): mirroring 147 MiB per context across PCIe around every step would cost more than the
// step (docs/RUNTIME.md).
#include "runtime/kv_runtime_impl.hpp"

#include <cstring>

namespace activekv::runtime_impl {

void KvRuntimeImpl::init_state() {
  const StatePlan& sp = plan_.state;
  if (!sp.enabled()) return;
  state_slot_.assign(budgets_.slots(), UINT32_MAX);
  state_free_.resize(sp.device_slots);
  for (std::uint32_t i = 0; i < sp.device_slots; ++i) state_free_[i] = sp.device_slots - 1 - i;
  state_free_count_ = sp.device_slots;
  checkpoint_pos_.assign(std::size_t{budgets_.slots()} * sp.checkpoints, UINT32_MAX);
  prompt_checkpoint_.assign(budgets_.slots(), 0);
  state_restored_.assign(budgets_.slots(), 0);
  state_tickets_.resize(sizes_.entries_max);
  state_fences_.resize(sizes_.entries_max);
  state_pending_.resize(sizes_.entries_max);
}

std::span<std::byte> KvRuntimeImpl::state_bytes(std::uint32_t recurrent_slot) noexcept {
  AK_ASSERT(recurrent_slot < plan_.state.device_slots, "kv runtime: recurrent slot out of range");
  return backend_.arena_host_view().subspan(plan_.arena.recurrent_offset(recurrent_slot), plan_.state.state_bytes);
}

void KvRuntimeImpl::bind_state(ContextId context) noexcept {
  if (!plan_.state.enabled()) return;
  const std::uint32_t slot = context.slot;
  AK_ASSERT(state_slot_[slot] == UINT32_MAX, "kv runtime: a history's context already holds a recurrent slot");
  // Running contexts ≤ concurrency = device slots: a slot is always free at admission.
  AK_ASSERT(state_free_count_ > 0, "kv runtime: no free recurrent slot for an admitted context");
  state_slot_[slot] = state_free_[--state_free_count_];
  std::memset(state_bytes(state_slot_[slot]).data(), 0, plan_.state.state_bytes);
  prompt_checkpoint_[slot] = 0;
  state_restored_[slot] = 0;
}

void KvRuntimeImpl::release_state(std::uint32_t slot) noexcept {
  if (!plan_.state.enabled() || state_slot_[slot] == UINT32_MAX) return;
  AK_ASSERT(state_free_count_ < state_free_.size(), "kv runtime: recurrent slots returned twice");
  state_free_[state_free_count_++] = state_slot_[slot];
  state_slot_[slot] = UINT32_MAX;
}

void KvRuntimeImpl::drop_checkpoints(std::uint32_t slot, std::uint32_t above_tokens) noexcept {
  if (!plan_.state.enabled()) return;
  std::uint32_t* pos = checkpoint_pos_.data() + std::size_t{slot} * plan_.state.checkpoints;
  for (std::uint32_t i = 0; i < plan_.state.checkpoints; ++i) {
    if (pos[i] != UINT32_MAX && pos[i] > above_tokens) pos[i] = UINT32_MAX;
  }
}

std::uint32_t KvRuntimeImpl::checkpoint_before(std::uint32_t slot, std::uint32_t tokens, std::uint32_t* index) const noexcept {
  std::uint32_t best = 0;
  if (index != nullptr) *index = UINT32_MAX;
  const std::uint32_t* pos = checkpoint_pos_.data() + std::size_t{slot} * plan_.state.checkpoints;
  for (std::uint32_t i = 0; i < plan_.state.checkpoints; ++i) {
    if (pos[i] == UINT32_MAX || pos[i] > tokens || pos[i] <= best) continue;
    best = pos[i];
    if (index != nullptr) *index = i;
  }
  return best;
}

runtime::PrefixMatch KvRuntimeImpl::clamp_to_checkpoint(runtime::PrefixMatch match) noexcept {
  if (!plan_.state.enabled() || match.pages == 0) return match;
  AK_ASSERT(plan_.state.checkpoints != 0, "kv runtime: a prefix match without state checkpoints (reuse is on)");
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint32_t tokens = checkpoint_before(match.slot, match.pages * P, nullptr);
  AK_ASSERT(tokens % P == 0, "kv runtime: a state checkpoint off a page boundary");
  counters_.state_clamped_tokens += std::uint64_t{match.pages} * P - tokens;
  match.pages = tokens / P;
  return match;
}

bool KvRuntimeImpl::restore_state(ContextId context, std::uint32_t from_slot, std::uint32_t tokens) noexcept {
  if (!plan_.state.enabled() || tokens == 0) return true;
  const StatePlan& sp = plan_.state;
  const std::uint32_t slot = context.slot;
  std::uint32_t index = UINT32_MAX;
  const std::uint32_t at = checkpoint_before(from_slot, tokens, &index);
  AK_ASSERT(at == tokens && index != UINT32_MAX, "kv runtime: an adopted length is not a checkpoint's position");
  if (from_slot != slot) {
    // Copy on adopt: the checkpoints at or below the adopted length come along (host to host,
    // between steps), so this history can serve its own follow-ups from them.
    const std::span<std::byte> host = backend_.host_pool();
    for (std::uint32_t i = 0; i < sp.checkpoints; ++i) {
      const std::uint32_t p = checkpoint_pos_[std::size_t{from_slot} * sp.checkpoints + i];
      checkpoint_pos_[std::size_t{slot} * sp.checkpoints + i] = p != UINT32_MAX && p <= tokens ? p : UINT32_MAX;
      if (checkpoint_pos_[std::size_t{slot} * sp.checkpoints + i] == UINT32_MAX) continue;
      std::memcpy(host.data() + sp.checkpoint_offset(slot, i), host.data() + sp.checkpoint_offset(from_slot, i),
                  sp.state_bytes);
    }
  } else {
    drop_checkpoints(slot, tokens);
  }
  // Host checkpoint → the context's recurrent slot, under a read ticket and a fence, waited here
  // (admission, not the step path): the first step reads the state.
  const std::uint64_t host_offset = sp.checkpoint_offset(slot, index);
  Ticket ticket{};
  if (tickets_.open(host_offset, sp.state_bytes, HostAccess::read, &ticket) != LeaseStatus::ok) {
    ++counters_.state_failures;
    return false;
  }
  const CopyRegion region{host_offset, plan_.arena.recurrent_offset(state_slot_[slot]), sp.state_bytes};
  Result<Fence> fence = backend_.copy(CopyDirection::h2d, {&region, 1});
  bool ok = fence.ok();
  if (ok) {
    tickets_.attach(ticket, *fence);
    Result<FenceOutcome> o = backend_.wait_host(*fence, settings_.fence_timeout);
    ok = o.ok() && *o == FenceOutcome::signalled;
    if (!o.ok() || *o == FenceOutcome::pending) stalled_ = true;
    backend_.release_fence(*fence);
  }
  close_ticket(ticket);
  if (!ok) {
    ++counters_.state_failures;
    return false;
  }
  state_restored_[slot] = tokens;
  ++counters_.state_restores;
  counters_.state_restore_bytes += sp.state_bytes;
  return true;
}

std::uint32_t KvRuntimeImpl::checkpoint_index(std::uint32_t slot, std::uint32_t tokens) const noexcept {
  const StatePlan& sp = plan_.state;
  const std::uint64_t every = std::uint64_t{sp.checkpoint_pages} * sp.page_tokens;
  if (every != 0 && tokens % every == 0) {
    const std::uint64_t i = StatePlan::every_first + tokens / every - 1;
    AK_ASSERT(i < sp.checkpoints, "kv runtime: a K-page checkpoint past the history's checkpoints");
    return static_cast<std::uint32_t>(i);
  }
  if (tokens == prompt_checkpoint_[slot]) return StatePlan::prompt;
  return StatePlan::latest;
}

void KvRuntimeImpl::checkpoint_states() noexcept {
  if (plan_.state.checkpoints == 0 || fault_.what != nullptr) return;  // no reuse: nothing to keep
  const StatePlan& sp = plan_.state;
  std::uint32_t pending = 0;
  for (std::uint32_t e = 0; e < entries(); ++e) {
    const ContextId context = scheduled_[e].context;
    const std::uint32_t slot = context.slot;
    const std::uint32_t tokens = layer_plan(0, e).length_tokens;
    if (tokens == 0 || tokens % sp.page_tokens != 0) continue;
    const std::uint32_t index = checkpoint_index(slot, tokens);
    const std::uint64_t host_offset = sp.checkpoint_offset(slot, index);
    // Cleared before the copy: a checkpoint names only bytes that arrived.
    checkpoint_pos_[std::size_t{slot} * sp.checkpoints + index] = UINT32_MAX;
    Ticket ticket{};
    if (tickets_.open(host_offset, sp.state_bytes, HostAccess::write, &ticket) != LeaseStatus::ok) {
      note_fault("the state checkpoint's host range could not be leased", FenceOutcome::failed, UINT32_MAX);
      break;
    }
    const CopyRegion region{plan_.arena.recurrent_offset(state_slot_[slot]), host_offset, sp.state_bytes};
    Result<Fence> fence = backend_.copy(CopyDirection::d2h, {&region, 1});
    if (!fence.ok()) {
      close_ticket(ticket);
      note_refusal("the state checkpoint (d2h) was refused", fence.error(), UINT32_MAX);
      break;
    }
    tickets_.attach(ticket, *fence);
    state_tickets_[pending] = ticket;
    state_fences_[pending] = *fence;
    state_pending_[pending] = (std::uint64_t{e} << 32) | index;
    ++pending;
  }
  for (std::uint32_t i = 0; i < pending; ++i) {
    const FenceOutcome o = wait(state_fences_[i], "the state checkpoint (d2h) did not signal", UINT32_MAX);
    release_fence(state_fences_[i]);
    close_ticket(state_tickets_[i]);
    const auto e = static_cast<std::uint32_t>(state_pending_[i] >> 32);
    const auto index = static_cast<std::uint32_t>(state_pending_[i]);
    if (o != FenceOutcome::signalled) {
      ++counters_.state_failures;
      continue;
    }
    const std::uint32_t slot = scheduled_[e].context.slot;
    checkpoint_pos_[std::size_t{slot} * sp.checkpoints + index] = layer_plan(0, e).length_tokens;
    ++counters_.state_checkpoints;
    counters_.state_checkpoint_bytes += sp.state_bytes;
  }
}

Result<std::span<std::byte>> KvRuntimeImpl::recurrent_state(ContextId context) {
  if (!plan_.state.enabled()) {
    return make_error(ErrorCode::invalid_argument, "recurrent_state",
                      "the model's geometry has no recurrent state (recurrent_state_bytes is 0)");
  }
  if (!step_open_) {
    return make_error(ErrorCode::invalid_argument, "recurrent_state",
                      "a context's recurrent state is valid only between begin_step and end_step");
  }
  for (std::uint32_t e = 0; e < entries(); ++e) {
    if (scheduled_[e].context.slot != context.slot || scheduled_[e].context.generation != context.generation) continue;
    AK_ASSERT(state_slot_[context.slot] != UINT32_MAX, "kv runtime: a running context without a recurrent slot");
    return state_bytes(state_slot_[context.slot]);
  }
  return make_error(ErrorCode::invalid_argument, "recurrent_state", "the context is not in the open step");
}

void KvRuntimeImpl::note_prompt(ContextId context, std::uint32_t prompt_tokens) {
  if (!plan_.state.enabled() || !budgets_.current(context)) return;
  // The longest prefix the same prompt could adopt leaves one token to prefill (local_prefix).
  const std::uint32_t P = plan_.arena.page_tokens;
  prompt_checkpoint_[context.slot] = prompt_tokens == 0 ? 0 : (prompt_tokens - 1) / P * P;
}

std::uint32_t KvRuntimeImpl::tokens_to_checkpoint(ContextId context) const {
  if (!budgets_.current(context)) return UINT32_MAX;
  const std::uint32_t length = budgets_.context(context.slot).length_tokens;
  std::uint32_t next = UINT32_MAX;
  // A window-layer model with a shared tier: a chunk ends at each tier block's end, where
  // offer_running() writes the block while the rings still hold its rows (kv_runtime_tier.cpp).
  if (tier_ != nullptr && plan_.host.ring_tokens != 0) {
    const std::uint64_t at = (std::uint64_t{length} / tier_->block_tokens() + 1) * tier_->block_tokens();
    if (at <= plan_.host.max_context_tokens) next = static_cast<std::uint32_t>(at);
  }
  if (!plan_.state.enabled()) return next == UINT32_MAX ? UINT32_MAX : next - length;
  if (prompt_checkpoint_[context.slot] > length && prompt_checkpoint_[context.slot] < next) next = prompt_checkpoint_[context.slot];
  const std::uint64_t every = std::uint64_t{plan_.state.checkpoint_pages} * plan_.state.page_tokens;
  if (every != 0) {
    const std::uint64_t at = (length / every + 1) * every;
    if (at <= plan_.host.max_context_tokens && at < next) next = static_cast<std::uint32_t>(at);
  }
  return next == UINT32_MAX ? UINT32_MAX : next - length;
}

const char* KvRuntimeImpl::check_state() const noexcept {
  if (!plan_.state.enabled()) return nullptr;
  std::uint32_t bound = 0;
  for (std::uint32_t slot = 0; slot < budgets_.slots(); ++slot) {
    const bool running = budgets_.context(slot).running;
    if (running != (state_slot_[slot] != UINT32_MAX)) return "recurrent state: a running context without a slot, or a slot kept after it left";
    if (running) ++bound;
    const std::uint32_t length = budgets_.context(slot).length_tokens;
    for (std::uint32_t i = 0; i < plan_.state.checkpoints; ++i) {
      const std::uint32_t p = checkpoint_pos_[std::size_t{slot} * plan_.state.checkpoints + i];
      if (p == UINT32_MAX) continue;
      if (p % plan_.arena.page_tokens != 0) return "recurrent state: a checkpoint off a page boundary";
      if (running && p > length) return "recurrent state: a checkpoint past its running context's length";
    }
  }
  if (bound + state_free_count_ != plan_.state.device_slots) return "recurrent state: free + bound slots ≠ the plan's slots";
  return nullptr;
}

void KvRuntimeImpl::explain_state(ContextId context, Explanation& e) const {
  if (!plan_.state.enabled()) return;
  const std::uint32_t slot = context.slot;
  e.recurrent_slot = state_slot_[slot];
  e.state_bytes = plan_.state.state_bytes;
  e.state_restored_tokens = state_restored_[slot];
  e.state_checkpoints_held = 0;
  e.state_checkpoint_newest = 0;
  for (std::uint32_t i = 0; i < plan_.state.checkpoints; ++i) {
    const std::uint32_t p = checkpoint_pos_[std::size_t{slot} * plan_.state.checkpoints + i];
    if (p == UINT32_MAX) continue;
    ++e.state_checkpoints_held;
    e.state_checkpoint_newest = std::max(e.state_checkpoint_newest, p);
  }
}

}  // namespace activekv::runtime_impl
