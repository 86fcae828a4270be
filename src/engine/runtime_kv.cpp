// runtime_kv.cpp — see runtime_kv.hpp.
#include "engine/runtime_kv.hpp"

#include <algorithm>

#include "engine/thread_pool.hpp"

namespace activekv::engine {

KvRuntimeSettings runtime_settings(const Model& model, MemorySettings memory, const ForwardLimits& limits) {
  memory.geometry = model.geometry();
  if (memory.max_context_tokens == 0) memory.max_context_tokens = model.config().context_tokens;
  // A context appends at most one step's tokens per step.
  memory.chunk_tokens = std::min(memory.chunk_tokens, limits.step_tokens_max);
  KvRuntimeSettings s;
  s.memory = memory;
  s.q_heads = model.config().q_heads;
  s.step_entries_max = limits.step_entries_max;
  s.step_tokens_max = limits.step_tokens_max;
  return s;
}

void choose_history_reads(KvRuntimeSettings& settings, const Backend& backend) {
  settings.read_in_place = backend.capabilities().kernel_reads_host_pool;
}

namespace {
// ParallelChunks::run over the engine's pool: the chunks on its threads (the caller's included).
// Then, unless the backend's attention runs on the pool too, the workers sleep at once, leaving
// the cores to the attention kernel's own threads.
void run_on_pool(void* lent, ParallelChunks::Task task, void* context, std::uint32_t chunks) noexcept {
  struct Region {
    ParallelChunks::Task task;
    void* context;
  } region{task, context};
  const auto& pool = *static_cast<const RuntimeKv::LentPool*>(lent);
  pool.threads->run_chunks(
      [](void* r, std::uint32_t chunk, std::uint32_t, std::uint32_t) {
        const Region& x = *static_cast<const Region*>(r);
        x.task(x.context, chunk);
      },
      &region, chunks);
  if (pool.park_after) pool.threads->park();
}
}  // namespace

void RuntimeKv::share_threads(ThreadPool* pool) {
  ParallelChunks parallel;
  lent_ = LentPool{pool, true};
  if (pool != nullptr) {
    parallel.run = &run_on_pool;
    parallel.pool = &lent_;
    parallel.threads = pool->threads();
  }
  runtime_.set_parallel(parallel);
  lent_.park_after = !runtime_.attention_borrows_threads();
}

}  // namespace activekv::engine
