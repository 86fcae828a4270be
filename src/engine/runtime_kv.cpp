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
// ParallelChunks::run over the engine's pool: the chunks on its threads (the caller's included),
// then the workers sleep at once, leaving the cores to the attention kernel's threads.
void run_on_pool(void* pool, ParallelChunks::Task task, void* context, std::uint32_t chunks) noexcept {
  struct Region {
    ParallelChunks::Task task;
    void* context;
  } region{task, context};
  auto& threads = *static_cast<ThreadPool*>(pool);
  threads.run_chunks(
      [](void* r, std::uint32_t chunk, std::uint32_t, std::uint32_t) {
        const Region& x = *static_cast<const Region*>(r);
        x.task(x.context, chunk);
      },
      &region, chunks);
  threads.park();
}
}  // namespace

void RuntimeKv::share_threads(ThreadPool* pool) {
  ParallelChunks parallel;
  if (pool != nullptr) {
    parallel.run = &run_on_pool;
    parallel.pool = pool;
    parallel.threads = pool->threads();
  }
  runtime_.set_parallel(parallel);
}

}  // namespace activekv::engine
