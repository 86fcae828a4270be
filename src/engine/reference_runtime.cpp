// reference_runtime.cpp — see reference_runtime.hpp.
#include "engine/reference_runtime.hpp"

#include <fmt/format.h>

#include "activekv/assert.hpp"

namespace activekv::engine {

ReferenceRuntime::ReferenceRuntime(const Geometry& geometry, std::uint32_t q_heads, std::uint32_t page_tokens,
                                   std::uint32_t max_context_tokens)
    : kv_(geometry, q_heads, page_tokens), max_context_tokens_(max_context_tokens) {}

const ReferenceRuntime::Slot& ReferenceRuntime::slot(ContextId context) const {
  AK_ASSERT(context.slot < slots_.size(), "reference runtime: unknown context");
  const Slot& s = slots_[context.slot];
  AK_ASSERT(s.open, "reference runtime: context is finished");
  AK_ASSERT(s.generation == context.generation, "reference runtime: stale context handle");
  return s;
}

Result<Admission> ReferenceRuntime::open_context(std::uint32_t tokens_max) {
  if (tokens_max == 0 || tokens_max > max_context_tokens_) {
    return make_error(ErrorCode::invalid_argument, "--max-context",
                      fmt::format("a context of {} tokens; the limit is {}", tokens_max, max_context_tokens_));
  }
  Slot s;
  s.kv_index = kv_.open();
  s.generation = 1;
  s.tokens_max = tokens_max;
  s.open = true;
  slots_.push_back(s);
  return Admission{ContextId{static_cast<std::uint32_t>(slots_.size() - 1), 1}, AdmissionOutcome::admitted, ""};
}

bool ReferenceRuntime::is_admitted(ContextId context) const { return slot(context).open; }

void ReferenceRuntime::finish(ContextId context) {
  slot(context);
  slots_[context.slot].open = false;
}

void ReferenceRuntime::cancel(ContextId context) { finish(context); }

std::uint32_t ReferenceRuntime::length(ContextId context) const { return slot(context).length; }

Status ReferenceRuntime::begin_step(std::span<const StepEntry> entries) {
  AK_ASSERT(!in_step_, "reference runtime: begin_step inside a step");
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

void ReferenceRuntime::write_kv(std::uint32_t layer, const float* k, const float* v) {
  AK_ASSERT(in_step_, "reference runtime: write_kv outside a step");
  const std::size_t head_elems = std::size_t{kv_.geometry().kv_heads} * kv_.geometry().head_dim;
  std::size_t row = 0;
  for (const StepEntry& e : step_) {
    kv_.append(slots_[e.context.slot].kv_index, layer, k + row * head_elems, v + row * head_elems, e.tokens_new);
    row += e.tokens_new;
  }
  counters_.h2d_bytes += row * kv_.geometry().row_bytes();
}

void ReferenceRuntime::attend(std::uint32_t layer, const float* q, float* out) {
  AK_ASSERT(in_step_, "reference runtime: attend outside a step");
  const std::size_t q_elems = std::size_t{kv_.q_heads()} * kv_.geometry().head_dim;
  std::size_t row = 0;
  for (const StepEntry& e : step_) {
    const Slot& s = slots_[e.context.slot];
    kv_.attend(s.kv_index, layer, q + row * q_elems, e.tokens_new, s.length, out + row * q_elems);
    row += e.tokens_new;
  }
}

Status ReferenceRuntime::end_step() {
  AK_ASSERT(in_step_, "reference runtime: end_step outside a step");
  for (const StepEntry& e : step_) slots_[e.context.slot].length += e.tokens_new;
  in_step_ = false;
  counters_.steps += 1;
  return Status::success();
}

std::span<const std::byte> ReferenceRuntime::host_row(ContextId context, std::uint32_t layer,
                                                      std::uint32_t token) const {
  return kv_.encoded_row(slot(context).kv_index, layer, token);
}

}  // namespace activekv::engine
