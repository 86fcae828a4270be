// reference_kv_access.hpp — KvAccess over the runtime's contiguous oracle
// (runtime::ReferenceKv): no pages on a device, no budgets, no fences.
//
// Why it exists: it is the engine's test oracle. The same forward pass runs
// over it and over the real KV runtime; with the same page size both compute
// the contract's paged attention, so their logits can be compared bit for bit.
// It also runs the engine where no runtime is wanted (tests of the arithmetic).
// It allocates as histories grow: never use it to measure allocation.
#pragma once

#include <vector>

#include "engine/kv_access.hpp"
#include "runtime/reference_kv.hpp"

namespace activekv::engine {

class ReferenceKvAccess final : public KvAccess {
 public:
  ReferenceKvAccess(const Geometry& geometry, std::uint32_t q_heads, std::uint32_t page_tokens);

  // A new, empty context of at most tokens_max tokens.
  ContextId open(std::uint32_t tokens_max);

  std::uint32_t length(ContextId context) const override;
  Status begin_step(std::span<const StepEntry> entries) override;
  Status write_kv(std::uint32_t layer, const float* k, const float* v) override;
  Status attend(std::uint32_t layer, const float* q, float* out) override;
  Status end_step() override;
  // Its own host buffer per context: geometry.recurrent_state_bytes, zero at open().
  Result<std::span<std::byte>> recurrent_state(ContextId context) override;

 private:
  struct Slot {
    std::uint32_t length = 0;      // rows in every layer, as of the last end_step
    std::uint32_t tokens_max = 0;
    std::vector<std::byte> state;  // the recurrent state (empty without recurrent layers)
  };
  const Slot& slot(ContextId context) const;

  runtime::ReferenceKv kv_;
  std::vector<Slot> slots_;  // index = ContextId::slot = the ReferenceKv context index
  std::vector<StepEntry> step_;
  bool in_step_ = false;
};

}  // namespace activekv::engine
