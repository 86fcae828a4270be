// reference_kv_access.cpp — see reference_kv_access.hpp.
#include "engine/reference_kv_access.hpp"

#include <fmt/format.h>

#include "activekv/assert.hpp"

namespace activekv::engine {

ReferenceKvAccess::ReferenceKvAccess(const Geometry& geometry, std::uint32_t q_heads, std::uint32_t page_tokens)
    : kv_(geometry, q_heads, page_tokens) {}

ContextId ReferenceKvAccess::open(std::uint32_t tokens_max) {
  const std::uint32_t index = kv_.open();
  AK_ASSERT(index == slots_.size(), "reference kv access: context indices out of step");
  slots_.push_back(Slot{0, tokens_max, std::vector<std::byte>(kv_.geometry().recurrent_state_bytes)});
  return ContextId{index, 1};
}

const ReferenceKvAccess::Slot& ReferenceKvAccess::slot(ContextId context) const {
  AK_ASSERT(context.slot < slots_.size(), "reference kv access: unknown context");
  AK_ASSERT(context.generation == 1, "reference kv access: stale context handle");
  return slots_[context.slot];
}

std::uint32_t ReferenceKvAccess::length(ContextId context) const { return slot(context).length; }

Status ReferenceKvAccess::begin_step(std::span<const StepEntry> entries) {
  AK_ASSERT(!in_step_, "reference kv access: begin_step inside a step");
  for (const StepEntry& e : entries) {
    const Slot& s = slot(e.context);
    if (s.length + e.tokens_new > s.tokens_max) {
      return make_error(ErrorCode::refused, "--max-context",
                        fmt::format("context would reach {} tokens, past its limit of {}", s.length + e.tokens_new,
                                    s.tokens_max));
    }
  }
  step_.assign(entries.begin(), entries.end());
  in_step_ = true;
  return Status::success();
}

Status ReferenceKvAccess::write_kv(std::uint32_t layer, const float* k, const float* v) {
  AK_ASSERT(in_step_, "reference kv access: write_kv outside a step");
  const std::size_t head_elems = std::size_t{kv_.geometry().kv_heads} * kv_.geometry().head_dim;
  std::size_t row = 0;
  for (const StepEntry& e : step_) {
    kv_.append(e.context.slot, layer, k + row * head_elems, v + row * head_elems, e.tokens_new);
    row += e.tokens_new;
  }
  return Status::success();
}

Status ReferenceKvAccess::attend(std::uint32_t layer, const float* q, float* out) {
  AK_ASSERT(in_step_, "reference kv access: attend outside a step");
  const std::size_t q_elems = std::size_t{kv_.q_heads()} * kv_.geometry().head_dim;
  std::size_t row = 0;
  for (const StepEntry& e : step_) {
    kv_.attend(e.context.slot, layer, q + row * q_elems, e.tokens_new, slots_[e.context.slot].length,
               out + row * q_elems);
    row += e.tokens_new;
  }
  return Status::success();
}

Result<std::span<std::byte>> ReferenceKvAccess::recurrent_state(ContextId context) {
  AK_ASSERT(in_step_, "reference kv access: recurrent_state outside a step");
  bool in_step = false;
  for (const StepEntry& e : step_) in_step = in_step || e.context == context;
  AK_ASSERT(in_step, "reference kv access: recurrent_state of a context not in the step");
  Slot& s = slots_[context.slot];
  if (s.state.empty()) return KvAccess::recurrent_state(context);
  return std::span<std::byte>(s.state);
}

Status ReferenceKvAccess::end_step() {
  AK_ASSERT(in_step_, "reference kv access: end_step outside a step");
  for (const StepEntry& e : step_) slots_[e.context.slot].length += e.tokens_new;
  in_step_ = false;
  return Status::success();
}

}  // namespace activekv::engine
