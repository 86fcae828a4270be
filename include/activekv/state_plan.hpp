// state_plan.hpp — where a hybrid model's recurrent state lives: device slots and host checkpoints.
//
// A recurrent layer (Gated DeltaNet, Mamba) holds a fixed-size state per context instead of a row
// per token. It exists at one position only, so the memory plan keeps it in two places:
//
//   device  one recurrent slot per running context (ArenaPlan::recurrent: slots × state_bytes),
//           bound at admission from a pool of its own, never mixed with KV pages; the forward pass
//           reads and updates it in place.
//   host    per history, `checkpoints` copies of the state, each tagged with the position (a whole
//           number of pages) it holds, written device-to-host under a ticket and a fence like a row:
//             latest   the newest page boundary a step ended on (the state a context leaves with,
//                      as far as a follow-up can adopt it: adoption is in whole pages)
//             prompt   the prompt's last whole page before its last token (note_prompt)
//             every K  one per K pages (--state-checkpoint-pages K; none when K = 0)
//
//   checkpoints          = 2 + (K > 0 ? floor(max_context / (K × page_tokens)) : 0)   (with prefix reuse;
//                          0 without: no context resumes, so no state is kept on the host)
//   state_bytes_history  = checkpoints × state_bytes
//   histories            = floor((host_pool − prefix_cache) / (history_bytes + state_bytes_history))
//   state area           = history_slots × state_bytes_history, after the histories and the cache
//
// A follow-up adopts the attention pages up to the newest checkpoint at or before its match point
// and the state of that checkpoint: its length is always a position where the state is known.
#pragma once

#include <cstdint>

namespace activekv {

struct MemorySettings;

struct StatePlan {
  std::uint64_t state_bytes = 0;           // geometry.recurrent_state_bytes (0: no recurrent layers)
  std::uint32_t page_tokens = 0;           // P
  std::uint32_t checkpoint_pages = 0;      // K: a checkpoint every K pages (0: none but latest and prompt)
  std::uint32_t checkpoints = 0;           // per history (0 without recurrent state)
  std::uint64_t bytes_per_history = 0;     // checkpoints × state_bytes
  std::uint32_t histories = 0;             // history_slots
  std::uint64_t offset = 0;                // host pool offset of the state area
  std::uint64_t bytes = 0;                 // histories × bytes_per_history
  std::uint32_t device_slots = 0;          // = ArenaPlan::recurrent_slots
  std::uint64_t device_bytes = 0;          // device_slots × state_bytes

  // Checkpoint indexes within a history.
  static constexpr std::uint32_t latest = 0;
  static constexpr std::uint32_t prompt = 1;
  static constexpr std::uint32_t every_first = 2;

  bool enabled() const noexcept { return state_bytes != 0; }
  std::uint64_t checkpoint_offset(std::uint32_t history, std::uint32_t index) const noexcept {
    return offset + std::uint64_t{history} * bytes_per_history + std::uint64_t{index} * state_bytes;
  }
  std::uint64_t history_offset(std::uint32_t history) const noexcept {
    return offset + std::uint64_t{history} * bytes_per_history;
  }
};

// Checkpoints per history and their bytes, from the settings alone (0 without recurrent state).
std::uint32_t state_checkpoints(const MemorySettings& settings) noexcept;
std::uint64_t state_bytes_per_history(const MemorySettings& settings) noexcept;

}  // namespace activekv
