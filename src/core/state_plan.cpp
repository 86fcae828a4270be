// state_plan.cpp — the recurrent state's checkpoints per history (the plan: state_plan.hpp).
#include "activekv/state_plan.hpp"

#include "activekv/memory_plan.hpp"

namespace activekv {

std::uint32_t state_checkpoints(const MemorySettings& s) noexcept {
  if (s.geometry.recurrent_state_bytes == 0 || s.page_tokens == 0 || !s.state_checkpoints) return 0;
  const std::uint64_t every_tokens = std::uint64_t{s.state_checkpoint_pages} * s.page_tokens;
  const std::uint64_t every = every_tokens == 0 ? 0 : s.max_context_tokens / every_tokens;
  return static_cast<std::uint32_t>(StatePlan::every_first + every);
}

std::uint64_t state_bytes_per_history(const MemorySettings& s) noexcept {
  __extension__ typedef unsigned __int128 u128;
  const u128 bytes = static_cast<u128>(state_checkpoints(s)) * s.geometry.recurrent_state_bytes;
  return bytes > UINT64_MAX / 4 ? UINT64_MAX / 4 : static_cast<std::uint64_t>(bytes);
}

}  // namespace activekv
