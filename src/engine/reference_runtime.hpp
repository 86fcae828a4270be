// reference_runtime.hpp — a KvRuntime whose KV is the runtime's contiguous
// oracle (runtime::ReferenceKv): no pages, no device, no budgets.
//
// Why it exists: it is the engine's test oracle. The same forward pass runs
// over it and over the real KV runtime, and the logits must agree (bit for
// bit when both compute the contract's paged attention with the same page
// size). It also lets the engine be built and checked where no runtime is
// wanted. It allocates as histories grow: never use it to measure allocation.
#pragma once

#include <memory>
#include <vector>

#include "activekv/kv_runtime.hpp"
#include "runtime/reference_kv.hpp"

namespace activekv::engine {

class ReferenceRuntime final : public KvRuntime {
 public:
  ReferenceRuntime(const Geometry& geometry, std::uint32_t q_heads, std::uint32_t page_tokens,
                   std::uint32_t max_context_tokens);

  Result<Admission> open_context(std::uint32_t tokens_max) override;
  bool is_admitted(ContextId context) const override;
  void finish(ContextId context) override;
  void cancel(ContextId context) override;
  std::uint32_t length(ContextId context) const override;

  Status begin_step(std::span<const StepEntry> entries) override;
  void write_kv(std::uint32_t layer, const float* k, const float* v) override;
  void attend(std::uint32_t layer, const float* q, float* out) override;
  Status end_step() override;

  std::span<const std::byte> host_row(ContextId context, std::uint32_t layer, std::uint32_t token) const override;
  const KvCounters& counters() const override { return counters_; }

 private:
  struct Slot {
    std::uint32_t kv_index = 0;   // context index inside the ReferenceKv
    std::uint32_t generation = 0;
    std::uint32_t length = 0;     // rows in every layer, as of the last end_step
    std::uint32_t tokens_max = 0;
    bool open = false;
  };
  const Slot& slot(ContextId context) const;

  runtime::ReferenceKv kv_;
  std::uint32_t max_context_tokens_;
  std::vector<Slot> slots_;
  std::vector<StepEntry> step_;
  bool in_step_ = false;
  KvCounters counters_;
};

}  // namespace activekv::engine
