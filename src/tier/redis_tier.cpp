// redis_tier.cpp — see redis_tier.hpp.
#include "tier/redis_tier.hpp"

#include <array>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "activekv/assert.hpp"
#include "tier/tier_block.hpp"

namespace activekv::tier {
namespace {
constexpr std::size_t kKnownEntries = 4096;  // a power of two
}

Result<std::unique_ptr<RedisTier>> RedisTier::create(const RedisTierSettings& settings) {
  if (settings.page_tokens == 0 || settings.block_tokens == 0 || settings.block_tokens % settings.page_tokens != 0) {
    return make_error(ErrorCode::invalid_argument, "kv_tier.block_tokens",
                      fmt::format("a tier block must be a whole number of pages ({} tokens each), not {} tokens",
                                  settings.page_tokens, settings.block_tokens));
  }
  if (settings.max_context_tokens < settings.block_tokens) {
    return make_error(ErrorCode::invalid_argument, "kv_tier.block_tokens",
                      fmt::format("a tier block ({} tokens) must fit in --max-context ({} tokens)", settings.block_tokens,
                                  settings.max_context_tokens));
  }
  if (Status s = settings.geometry.validate(); !s.ok()) return s.error();
  std::unique_ptr<RedisTier> tier(new RedisTier(settings));
  auto writer = WriteBehind::create(settings.store, &tier->counters_, settings.write_queue_blocks,
                                    tier_block_bytes(settings.geometry, settings.block_tokens),
                                    settings.geometry.dense_layers);
  if (!writer.ok()) return writer.error();
  tier->writer_ = std::move(writer).value();
  tier->chain_.resize(settings.max_context_tokens / settings.block_tokens);
  tier->lookup_ = std::make_unique<TierLookup>(settings.store, &tier->counters_, settings.model_identity, settings.geometry,
                                               settings.block_tokens, static_cast<std::uint32_t>(tier->chain_.size()));
  tier->known_.assign(kKnownEntries, 0);
  tier->block_layers_.resize(settings.geometry.dense_layers);
  return tier;
}

bool RedisTier::known(std::uint64_t h) const noexcept { return known_[h & (kKnownEntries - 1)] == h; }
void RedisTier::remember(std::uint64_t h) noexcept { known_[h & (kKnownEntries - 1)] = h; }

std::uint32_t RedisTier::chain_of(std::span<const std::int32_t> prompt, std::uint32_t blocks_end) {
  blocks_end = std::min<std::uint32_t>(blocks_end, static_cast<std::uint32_t>(chain_.size()));
  const std::uint32_t blocks = tier_block_chain(prompt.first(std::size_t{blocks_end} * settings_.block_tokens),
                                                settings_.page_tokens, settings_.block_tokens, settings_.model_identity, chain_);
  AK_ASSERT(blocks == blocks_end, "redis tier: the prompt holds every block asked for");
  return blocks_end;
}

bool RedisTier::lookup_covers(std::uint32_t first_block, std::uint32_t blocks_end) const noexcept {
  const TierLookup& l = *lookup_;
  if (l.state() != TierLookup::State::done) return false;
  const std::span<const std::uint64_t> asked = l.chain();
  if (l.first_block() > first_block || l.first_block() + asked.size() < blocks_end) return false;
  // The chain hash of the last block names it and every block before it.
  return asked[blocks_end - 1 - l.first_block()] == chain_[blocks_end - 1];
}

bool RedisTier::prepare(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end) {
  blocks_end = std::min<std::uint32_t>(blocks_end, static_cast<std::uint32_t>(chain_.size()));
  if (blocks_end <= first_block) return true;  // nothing to look up
  if (lookup_->state() == TierLookup::State::running) return false;
  chain_of(prompt, blocks_end);
  if (lookup_covers(first_block, blocks_end)) return true;
  lookup_->start(std::span<const std::uint64_t>(chain_).subspan(first_block, blocks_end - first_block), first_block);
  return false;
}

std::uint32_t RedisTier::restore(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end,
                                 std::span<const std::span<std::byte>> layer_segments) {
  const std::uint32_t B = settings_.block_tokens;
  const Geometry& g = settings_.geometry;
  AK_ASSERT(layer_segments.size() == g.dense_layers, "redis tier: one segment per dense layer");
  blocks_end = std::min<std::uint32_t>(blocks_end, static_cast<std::uint32_t>(chain_.size()));
  if (blocks_end <= first_block) return first_block;
  chain_of(prompt, blocks_end);
  if (!lookup_covers(first_block, blocks_end)) return first_block;  // no lookup of these blocks ended: a miss
  const TierChainRead& read = lookup_->result();
  const std::uint32_t read_first = lookup_->first_block();
  const std::uint32_t end = std::min(blocks_end, read_first + read.blocks);
  const std::uint64_t layer_bytes = std::uint64_t{B} * g.row_bytes();
  std::uint32_t b = first_block;
  for (; b < end; ++b) {
    const std::span<const std::byte> payload = tier_chain_payload(read, b - read_first);
    const std::uint64_t at = std::uint64_t{b} * layer_bytes;
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      AK_ASSERT(at + layer_bytes <= layer_segments[l].size(), "redis tier: a restored block fits the history");
      std::memcpy(layer_segments[l].data() + at, tier_block_layer(payload, g, B, l).data(), layer_bytes);
    }
    remember(chain_[b]);
  }
  lookup_->consume();
  return std::max(first_block, b);
}

bool RedisTier::wait(std::uint32_t timeout_ms) {
  const std::chrono::milliseconds timeout(timeout_ms);
  if (lookup_->state() == TierLookup::State::running) return lookup_->wait(timeout);
  return writer_->wait_progress(timeout);
}

void RedisTier::offer(std::span<const std::int32_t> tokens, std::span<const std::span<const std::byte>> layer_segments,
                      std::uint32_t lease) {
  const std::uint32_t B = settings_.block_tokens;
  const Geometry& g = settings_.geometry;
  AK_ASSERT(layer_segments.size() == g.dense_layers, "redis tier: one segment per dense layer");
  const std::uint32_t blocks = tier_block_chain(tokens, settings_.page_tokens, B, settings_.model_identity, chain_);
  const std::uint64_t layer_bytes = std::uint64_t{B} * g.row_bytes();
  for (std::uint32_t b = 0; b < blocks; ++b) {
    if (known(chain_[b])) continue;
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      block_layers_[l] = layer_segments[l].subspan(std::uint64_t{b} * layer_bytes, layer_bytes);
    }
    const TierBlockIdentity id{settings_.model_identity, g, B, b, chain_[b]};
    std::array<char, kTierKeyBytes> key;  // no allocation on the engine thread
    const std::size_t n = tier_block_key_to(key, settings_.model_identity, g, chain_[b]);
    const bool queued = writer_->submit(std::string_view(key.data(), n), id, block_layers_, lease);
    if (queued) remember(chain_[b]);
  }
}

}  // namespace activekv::tier
