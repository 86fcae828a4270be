// tier_reader.cpp — see tier_reader.hpp.
#include "tier/tier_reader.hpp"

#include "activekv/assert.hpp"

namespace activekv::tier {

void read_tier_chain(TierStore& store, TierCounters& counters, std::uint64_t model_identity, const Geometry& geometry,
                     std::uint32_t block_tokens, std::span<const std::uint64_t> chain, TierChainRead& out,
                     std::uint32_t first_block) {
  out.blocks = 0;
  out.stopped_by = TierBlockCheck::ok;
  out.keys.resize(chain.size());
  for (std::size_t i = 0; i < chain.size(); ++i) out.keys[i] = tier_block_key(model_identity, geometry, chain[i]);
  const std::size_t present = store.get_chain(out.keys, out.values);
  std::uint32_t accepted = 0;
  for (; accepted < present; ++accepted) {
    const TierBlockIdentity id{model_identity, geometry, block_tokens, first_block + accepted, chain[accepted]};
    const std::span<const std::byte> value(reinterpret_cast<const std::byte*>(out.values[accepted].data()),
                                           out.values[accepted].size());
    const TierBlockCheck check = decode_tier_block(value, id, nullptr);
    if (check != TierBlockCheck::ok) {
      out.stopped_by = check;
      counters.refused.fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  out.blocks = accepted;
  counters.hits.fetch_add(accepted, std::memory_order_relaxed);
  if (accepted < chain.size()) counters.misses.fetch_add(1, std::memory_order_relaxed);
}

std::span<const std::byte> tier_chain_payload(const TierChainRead& read, std::uint32_t block) noexcept {
  AK_ASSERT(block < read.blocks, "tier reader: payload of a block that was not accepted");
  const std::string& v = read.values[block];
  return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), v.size()).subspan(kTierHeaderBytes);
}

}  // namespace activekv::tier
