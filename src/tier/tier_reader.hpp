// tier_reader.hpp — the longest run of a prompt's blocks the tier holds, checked before use.
//
// read_tier_chain() asks the store for every block key of the chain in one
// pipeline, then decodes the leading values in order; the first absent,
// refused (tier_block.hpp: checksum, version, model, geometry, key, size) or
// failed block ends the run. Counts: hits += blocks accepted; misses += 1 when
// the run stops short of the chain; refused += 1 for a value that was there
// but wrong (it is a miss too, never used).
//
// A run of accepted blocks is then cut (tier_chain_cut) to the longest run a restore can end on
// (docs/TIER.md, "Cuts"): an end E = e × block_tokens is usable when every window layer's rows of
// [window_first(E), E) — the pages a query at E reads — are in the run's blocks and are written by
// this restore (at or above `from_token`), and, for a hybrid, when block e − 1 carries its state.
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
  std::vector<TierBlockView> views;  // views[i] for i < blocks: block i's parts (into values[i])
  std::uint32_t blocks = 0;          // leading blocks accepted
  std::uint32_t window_blocks = 0;   // after the ring cut (tier_chain_cut): blocks whose end every window covers
  std::uint32_t usable_blocks = 0;   // after the state cut too: the run a restore adopts
  TierBlockCheck stopped_by = TierBlockCheck::ok;  // why the run ended early when a value was refused
};

// chain[i] is block first_block + i, covering tokens [(first_block + i) × block_tokens, … + block_tokens).
void read_tier_chain(TierStore& store, TierCounters& counters, std::uint64_t model_identity, const Geometry& geometry,
                     std::uint32_t block_tokens, std::span<const std::uint64_t> chain, TierChainRead& out,
                     std::uint32_t first_block = 0);

// What a restore's end must carry (the runtime's ring and state plans).
struct TierCutRule {
  std::uint32_t page_tokens = 0;
  std::uint32_t window_tokens = 0;   // W of the window layers (0: none)
  std::uint32_t ring_tokens = 0;     // their host ring (memory_plan.hpp; 0: none)
  bool state = false;                // a hybrid: the run ends at a block carrying its state
};

// The first token whose window rows a query at `end` needs: the start of the first page it reads.
std::uint32_t tier_window_first(const TierCutRule& rule, std::uint32_t end) noexcept;

// Sets read.window_blocks and read.usable_blocks (≤ read.blocks) for a run starting at block
// first_block whose rows are written from token from_token on. O(blocks × window blocks).
void tier_chain_cut(TierChainRead& read, const TierCutRule& rule, std::uint32_t block_tokens, std::uint32_t first_block,
                    std::uint32_t from_token) noexcept;

// The payload (rows, layer-major) of accepted block i.
std::span<const std::byte> tier_chain_payload(const TierChainRead& read, std::uint32_t block) noexcept;

}  // namespace activekv::tier
