// runtime_kv.cpp — see runtime_kv.hpp.
#include "engine/runtime_kv.hpp"

#include <algorithm>

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

}  // namespace activekv::engine
