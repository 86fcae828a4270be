// kv_tier.hpp — the KV runtime's port to a shared tier below the host pool (docs/TIER.md).
//
// The runtime knows nothing of the store behind it (src/tier/ implements this
// port on Redis). It calls the port between steps, never inside one, and no
// call touches the network:
//
//   before admission  prepare(): starts (or checks) a background lookup of the
//               prompt's whole blocks past what the host pool holds; until it
//               has ended the request waits in admission while others step.
//   admission   restore(): the blocks that lookup read and checked, copied into
//               the new history; the context's length starts after them, so
//               only the rest is prefilled.
//   finish      offer(): the finished history's whole blocks, handed to a
//               background writer that reads the history's rows itself, under
//               a lease (the history): the runtime keeps that history off its
//               free list while lease_held() says the writer still reads it.
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
  // True when restore() of these blocks may run now: a background lookup of them ended (or there
  // is nothing to look up). False: a lookup runs (this one, started now, or another's); ask again.
  virtual bool prepare(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end) = 0;
  // Restores blocks first_block, first_block + 1, … (< blocks_end) of `prompt` that the ended
  // lookup read and accepted, stopping at the first it did not; blocks before first_block are
  // already in the history. Returns the end of the restored run (first_block when nothing was
  // restored, and always when no matching lookup ended: never waits).
  virtual std::uint32_t restore(std::span<const std::int32_t> prompt, std::uint32_t first_block,
                                std::uint32_t blocks_end, std::span<const std::span<std::byte>> layer_segments) = 0;
  // Offers the whole blocks of `tokens`, whose rows the segments hold, to be written behind: the
  // writer reads the rows after offer() returns, while lease_held(lease) is true.
  virtual void offer(std::span<const std::int32_t> tokens, std::span<const std::span<const std::byte>> layer_segments,
                     std::uint32_t lease) = 0;
  virtual bool lease_held(std::uint32_t lease) const = 0;
  // Waits up to timeout_ms for a lookup to end or a write to finish (a waiting admission with
  // nothing else to step); true if one did.
  virtual bool wait(std::uint32_t timeout_ms) = 0;
};

}  // namespace activekv
