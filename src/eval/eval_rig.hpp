// eval_rig.hpp — the runtime, backend and forward pass one evaluation runs on.
//
// An evaluation holds one context per setting at once (setting_contexts.hpp):
// they share one exact prefix, adopted through prefix reuse, and take turns
// stepping, the runtime switched to each one's setting between steps. So the
// rig is sized for exactly that: a host pool of `contexts` histories of the
// window's length (unless the operator gives --host-pool, which is then
// checked like everywhere else), the device arena the operator gives, step
// limits of one prefill chunk, and prefix reuse on. The model and the thread
// pool are the caller's (the command loads them once; tests share them).
//
// Sparse settings need the per-page key summaries, which the runtime keeps
// only when created sparse: the rig creates it with the first sparse setting
// when there is one (exact steps are bit-identical either way).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "engine/forward.hpp"
#include "engine/model.hpp"
#include "engine/runtime_kv.hpp"
#include "engine/thread_pool.hpp"
#include "eval/eval_setting.hpp"

namespace activekv::eval {

struct RigSettings {
  std::uint32_t context_tokens = 0;     // the longest context a setting's context reaches (the window)
  std::uint32_t contexts = 1;           // contexts held at once: one per setting
  std::uint32_t chunk_tokens = 256;     // prefill tokens per step
  std::uint32_t page_tokens = page_tokens_default;
  std::uint32_t tile_tokens = 1024;     // clipped to the context, rounded down to whole pages
  std::uint64_t host_pool_bytes = 0;    // 0: exactly `contexts` histories of context_tokens
  std::uint64_t device_pool_bytes = 64ull << 20;
  std::string backend = "host";
  std::uint32_t compute_threads = 2;    // the backend's
  engine::Activations activations = engine::Activations::q16;  // --activations (engine/matmul_q8.hpp)
};

class EvalRig {
 public:
  // Refusals name the setting: a context past the model's (--context), a pool
  // that cannot hold every setting's context (--host-pool, --device-pool), an
  // unknown backend.
  static Result<std::unique_ptr<EvalRig>> create(const engine::Model& model, engine::ThreadPool& pool,
                                                 std::span<const EvalSetting> settings, const RigSettings& rig);
  ~EvalRig();
  EvalRig(const EvalRig&) = delete;
  EvalRig& operator=(const EvalRig&) = delete;

  KvRuntime& runtime() noexcept { return *runtime_; }
  engine::Forward& forward() noexcept { return *forward_; }
  const engine::Model& model() const noexcept { return model_; }

 private:
  explicit EvalRig(const engine::Model& model) : model_(model) {}

  const engine::Model& model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvRuntime> runtime_;
  std::unique_ptr<engine::RuntimeKv> kv_;
  std::unique_ptr<engine::Forward> forward_;
};

}  // namespace activekv::eval
