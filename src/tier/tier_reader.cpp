// tier_reader.cpp — see tier_reader.hpp.
#include "tier/tier_reader.hpp"

#include "activekv/assert.hpp"

namespace activekv::tier {

void read_tier_chain(TierStore& store, TierCounters& counters, std::uint64_t model_identity, const Geometry& geometry,
                     std::uint32_t block_tokens, std::span<const std::uint64_t> chain, TierChainRead& out,
                     std::uint32_t first_block) {
  out.blocks = 0;
  out.window_blocks = 0;
  out.usable_blocks = 0;
  out.views.resize(chain.size());
  out.stopped_by = TierBlockCheck::ok;
  out.keys.resize(chain.size());
  for (std::size_t i = 0; i < chain.size(); ++i) out.keys[i] = tier_block_key(model_identity, geometry, chain[i]);
  const std::size_t present = store.get_chain(out.keys, out.values);
  std::uint32_t accepted = 0;
  for (; accepted < present; ++accepted) {
    const TierBlockIdentity id{model_identity, geometry, block_tokens, first_block + accepted, chain[accepted]};
    const std::span<const std::byte> value(reinterpret_cast<const std::byte*>(out.values[accepted].data()),
                                           out.values[accepted].size());
    const TierBlockCheck check = decode_tier_block(value, id, &out.views[accepted]);
    if (check != TierBlockCheck::ok) {
      out.stopped_by = check;
      counters.refused.fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  out.blocks = accepted;
  out.window_blocks = accepted;
  out.usable_blocks = accepted;
  counters.hits.fetch_add(accepted, std::memory_order_relaxed);
  if (accepted < chain.size()) counters.misses.fetch_add(1, std::memory_order_relaxed);
}

std::uint32_t tier_window_first(const TierCutRule& rule, std::uint32_t end) noexcept {
  const std::uint32_t W = rule.window_tokens;
  return W != 0 && end + 1 > W ? (end + 1 - W) / rule.page_tokens * rule.page_tokens : 0;
}

void tier_chain_cut(TierChainRead& read, const TierCutRule& rule, std::uint32_t block_tokens, std::uint32_t first_block,
                    std::uint32_t from_token) noexcept {
  const std::uint32_t B = block_tokens;
  // Whether a restore ending at block e (exclusive, absolute) finds every window row it needs.
  auto window_held = [&](std::uint32_t e) {
    if (rule.window_tokens == 0) return true;
    const std::uint32_t end = e * B;
    const std::uint32_t first = tier_window_first(rule, end);
    if (first < from_token || end - first > rule.ring_tokens) return false;  // below what this restore writes
    for (std::uint32_t k = first / B; k < e; ++k) {
      if (k < first_block) return false;
      const std::uint32_t need_from = first > k * B ? first - k * B : 0;
      if (read.views[k - first_block].window_from > need_from) return false;
    }
    return true;
  };
  auto state_held = [&](std::uint32_t e) { return !rule.state || !read.views[e - 1 - first_block].state.empty(); };
  std::uint32_t window_end = first_block + read.blocks;
  while (window_end > first_block && !window_held(window_end)) --window_end;
  std::uint32_t end = window_end;
  while (end > first_block && !(window_held(end) && state_held(end))) --end;
  read.window_blocks = window_end - first_block;
  read.usable_blocks = end - first_block;
}

std::span<const std::byte> tier_chain_payload(const TierChainRead& read, std::uint32_t block) noexcept {
  AK_ASSERT(block < read.blocks, "tier reader: payload of a block that was not accepted");
  const std::string& v = read.values[block];
  return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), v.size()).subspan(kTierHeaderBytes);
}

}  // namespace activekv::tier
