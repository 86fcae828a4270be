// tier_reader.hpp — the longest run of a prompt's blocks the tier holds, checked before use.
//
// read_tier_chain() asks the store for every block key of the chain in one
// pipeline, then decodes the leading values in order; the first absent,
// refused (tier_block.hpp: checksum, version, model, geometry, key, size) or
// failed block ends the run. Counts: hits += blocks accepted; misses += 1 when
// the run stops short of the chain; refused += 1 for a value that was there
// but wrong (it is a miss too, never used).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "activekv/geometry.hpp"
#include "tier/tier_block.hpp"
#include "tier/tier_store.hpp"

namespace activekv::tier {

struct TierChainRead {
  std::vector<std::string> keys;     // scratch, one per block asked for
  std::vector<std::string> values;   // values[i] for i < blocks: a checked block (header + payload)
  std::uint32_t blocks = 0;          // leading blocks accepted
  TierBlockCheck stopped_by = TierBlockCheck::ok;  // why the run ended early when a value was refused
};

// chain[i] is block first_block + i, covering tokens [(first_block + i) × block_tokens, … + block_tokens).
void read_tier_chain(TierStore& store, TierCounters& counters, std::uint64_t model_identity, const Geometry& geometry,
                     std::uint32_t block_tokens, std::span<const std::uint64_t> chain, TierChainRead& out,
                     std::uint32_t first_block = 0);

// The payload (rows, layer-major) of accepted block i.
std::span<const std::byte> tier_chain_payload(const TierChainRead& read, std::uint32_t block) noexcept;

}  // namespace activekv::tier
