// kv_runtime_admission.cpp — admission, leaving, and reading a context (the class: kv_runtime_impl.hpp).
#include "runtime/kv_runtime_impl.hpp"

namespace activekv::runtime_impl {

// ---------------------------------------------------------------------------
// Admission
// ---------------------------------------------------------------------------

Result<AdmitResult> KvRuntimeImpl::open_context(std::uint64_t request_id, std::uint32_t tokens_max) {
  if (Status s = budgets_.check_request(tokens_max); !s.ok()) return s.error();
  const AdmitResult result = budgets_.submit(request_id, tokens_max);
  if (result.outcome == AdmitOutcome::refused && result.reason == Reason::no_usable_history) {
    return make_error(ErrorCode::backend, "device", fmt::format("request {} refused: {}", request_id, reason_text(result.reason)));
  }
  if (result.outcome == AdmitOutcome::refused) {
    return make_error(ErrorCode::exhausted, "--queue-max",
                      fmt::format("request {} refused: {}", request_id, reason_text(result.reason)));
  }
  if (result.outcome == AdmitOutcome::admitted) slot_faulted_[result.handle.slot] = 0;
  return result;
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
  policy_->forget(context.slot);
  const bool retire = history_quarantined(context.slot);
  if (finished) budgets_.finish(context, retire); else budgets_.cancel(context, retire);
  if (retire) ++counters_.histories_retired;
  slot_faulted_[context.slot] = 0;
}

void KvRuntimeImpl::apply_deferred_cancels() noexcept {
  AK_ASSERT(!step_open_, "kv runtime: deferred cancels apply once the step is closed");
  for (std::uint32_t i = 0; i < deferred_cancel_count_; ++i) cancel(deferred_cancels_[i]);
  deferred_cancel_count_ = 0;
}

bool KvRuntimeImpl::history_quarantined(std::uint32_t slot) const noexcept {
  return tickets_.range_quarantined(plan_.host.segment_offset(slot, 0), plan_.host.history_bytes);
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
  const std::uint64_t offset = plan_.host.row_offset(context.slot, layer, token);
  return backend_.host_pool().subspan(offset, plan_.host.row_bytes);
}

const char* KvRuntimeImpl::check() const {
  if (const char* broken = budgets_.check()) return broken;
  if (!leases_.validate()) return "staging leases: counts, free list or fences disagree";
  if (!tickets_.validate()) return "copy tickets: counts or fences disagree";
  if (backend_.stats().device_allocations != device_allocations_baseline_) return "invariant 7: a device allocation after warm-up";
  return nullptr;
}

}  // namespace activekv::runtime_impl
