// kv_tier.hpp — the KV runtime's port to a shared tier below the host pool (docs/TIER.md).
//
// The runtime knows nothing of the store behind it (src/tier/ implements this
// port on Redis). It calls the port at two moments, both between steps, never
// inside one:
//
//   admission   restore(): the prompt's whole blocks past what the host pool
//               already holds, read and checked, copied into the new history;
//               the context's length starts after them, so only the rest is prefilled.
//   finish      offer(): the finished history's whole blocks, handed to a
//               background writer; returns without touching the network.
//
// A block is block_tokens tokens (a whole number of pages) starting at a
// multiple of block_tokens; block b's rows of layer l are
// layer_segments[l][b × block_tokens × row_bytes, (b + 1) × block_tokens × row_bytes).
// A port never fails a caller: whatever goes wrong is a miss (fewer blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace activekv {

class KvTierPort {
 public:
  virtual ~KvTierPort() = default;
  virtual std::uint32_t block_tokens() const noexcept = 0;
  // Restores blocks first_block, first_block + 1, … (< blocks_end) of `prompt`, stopping at the
  // first the tier does not hold (or refuses); blocks before first_block are already in the
  // history. Returns the end of the restored run (first_block when nothing was restored).
  virtual std::uint32_t restore(std::span<const std::int32_t> prompt, std::uint32_t first_block,
                                std::uint32_t blocks_end, std::span<const std::span<std::byte>> layer_segments) = 0;
  // Offers the whole blocks of `tokens`, whose rows the segments hold, to be written behind.
  virtual void offer(std::span<const std::int32_t> tokens, std::span<const std::span<const std::byte>> layer_segments) = 0;
};

}  // namespace activekv
