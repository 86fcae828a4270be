// runtime_kv.hpp — KvAccess over the ActiveKV runtime: the production path.
//
// The forward pass's rows go to the tail pages on the device, attention runs
// through the backend's paged kernel over resident pages and staged tiles,
// and end_step writes the tail rows back to the authoritative host history.
// This adapter adds nothing to the runtime: it only narrows it to the five
// calls the arithmetic needs. The runtime (and its backend) stay owned by the
// caller, who also does admission; they must outlive the adapter.
//
// runtime_settings() maps a model and the operator's memory settings onto the
// runtime's: the geometry (the attention layers dense, f16 rows; a hybrid's
// recurrent state, Model::geometry) and q_heads come from
// the model, the sizes from the operator, the step limits from the engine.
#pragma once

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "engine/forward.hpp"
#include "engine/kv_access.hpp"
#include "engine/model.hpp"

namespace activekv::engine {

KvRuntimeSettings runtime_settings(const Model& model, MemorySettings memory, const ForwardLimits& limits);

// The engine's choice of how history below the device pool reaches the kernel: read in place in
// the host pool where the backend's kernel reads host memory (capabilities().kernel_reads_host_pool:
// the host backend, whose "device" is host RAM, so a staged copy would only add a second read and a
// write of every byte), staged through the tiles elsewhere (docs/IN_PLACE.md).
void choose_history_reads(KvRuntimeSettings& settings, const Backend& backend);

class RuntimeKv final : public KvAccess {
 public:
  explicit RuntimeKv(KvRuntime& runtime) : runtime_(runtime) {}

  std::uint32_t length(ContextId context) const override { return runtime_.length(context); }
  Status begin_step(std::span<const StepEntry> entries) override { return runtime_.begin_step(entries); }
  Status write_kv(std::uint32_t layer, const float* k, const float* v) override {
    return runtime_.write_kv(layer, k, v);
  }
  Status attend(std::uint32_t layer, const float* q, float* out) override { return runtime_.attend(layer, q, out); }
  Status end_step() override { return runtime_.end_step(); }
  // The context's slot in the arena's recurrent part (KvRuntime::recurrent_state).
  Result<std::span<std::byte>> recurrent_state(ContextId context) override { return runtime_.recurrent_state(context); }
  void note_prompt(ContextId context, std::uint32_t prompt_tokens) override {
    runtime_.note_prompt(context, prompt_tokens);
  }
  std::uint32_t tokens_to_checkpoint(ContextId context) const override {
    return runtime_.tokens_to_checkpoint(context);
  }
  // The runtime borrows the pool for the sparse selection's bound and, where the backend takes
  // it, for the attention kernel (KvRuntime::set_parallel).
  void share_threads(ThreadPool* pool) override;
  bool attention_borrows_threads() const override { return runtime_.attention_borrows_threads(); }

  // What ParallelChunks::pool points at: the pool, and whether its workers sleep after a region.
  struct LentPool {
    ThreadPool* threads = nullptr;
    bool park_after = true;
  };

 private:
  KvRuntime& runtime_;
  LentPool lent_;
};

}  // namespace activekv::engine
