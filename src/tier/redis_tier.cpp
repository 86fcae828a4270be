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
  const Geometry& g = settings.geometry;
  TierCutRule& rule = tier->rule_;
  rule.page_tokens = settings.page_tokens;
  rule.state = g.recurrent_state_bytes != 0;
  if (g.window_layers() != 0) {
    // memory_plan.cpp's ring: min(max context, (ceil(W / P) + 1) × P).
    const std::uint64_t window_pages = (std::uint64_t{g.kinds.window_tokens} + settings.page_tokens - 1) / settings.page_tokens;
    rule.window_tokens = g.kinds.window_tokens;
    rule.ring_tokens = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(settings.max_context_tokens, (window_pages + 1) * settings.page_tokens));
  }
  // Each job's copy of a running history's ring rows: a block's rows of every window layer.
  auto writer = WriteBehind::create(settings.store, &tier->counters_, settings.write_queue_blocks,
                                    tier_block_bytes_max(settings.geometry, settings.block_tokens),
                                    settings.geometry.dense_layers,
                                    std::uint64_t{g.window_layers()} * settings.block_tokens * g.row_bytes());
  if (!writer.ok()) return writer.error();
  tier->writer_ = std::move(writer).value();
  tier->chain_.resize(settings.max_context_tokens / settings.block_tokens);
  for (std::uint32_t i = 0; i < std::max<std::uint32_t>(1, settings.lookups); ++i) {
    tier->lookups_.push_back(std::make_unique<TierLookup>(settings.store, &tier->counters_, settings.model_identity,
                                                          settings.geometry, settings.block_tokens,
                                                          static_cast<std::uint32_t>(tier->chain_.size()), rule));
  }
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

std::size_t RedisTier::find(std::uint32_t blocks_end) const noexcept {
  for (std::size_t i = 0; i < lookups_.size(); ++i) {
    const TierLookup& l = *lookups_[i];
    if (l.phase() == TierLookup::Phase::idle) continue;
    // The chain hash of the last block names it and every block before it.
    if (l.first_block() + l.chain().size() == blocks_end && l.last_hash() == chain_[blocks_end - 1]) return i;
  }
  return lookups_.size();
}

TierLookupStatus RedisTier::lookup(std::span<const std::int32_t> prompt, std::uint32_t first_block,
                                   std::uint32_t blocks_end, bool evict) {
  blocks_end = std::min<std::uint32_t>(blocks_end, static_cast<std::uint32_t>(chain_.size()));
  AK_ASSERT(blocks_end > first_block, "redis tier: a lookup of at least one block");
  chain_of(prompt, blocks_end);
  if (const std::size_t i = find(blocks_end); i < lookups_.size()) {
    TierLookup& l = *lookups_[i];
    if (l.first_block() <= first_block) {
      switch (l.phase()) {
        case TierLookup::Phase::read: return TierLookupStatus::read;
        case TierLookup::Phase::done: return TierLookupStatus::ready;
        case TierLookup::Phase::copying: return TierLookupStatus::writing;
        default: return l.slot() == kNoSlot ? TierLookupStatus::reading : TierLookupStatus::writing;
      }
    }
    l.abandon();  // started past a local prefix that has since gone: look up again from first_block
  }
  TierLookup* idle = nullptr;
  for (auto& l : lookups_) {
    if (l->phase() == TierLookup::Phase::idle) idle = l.get();
  }
  if (idle == nullptr && evict) {
    // The queue head goes first: a lookup that is not in any history's rows gives way.
    for (auto& l : lookups_) {
      const TierLookup::Phase p = l->phase();
      if (idle == nullptr && (p == TierLookup::Phase::read || p == TierLookup::Phase::done)) {
        l->abandon();
        idle = l.get();
      }
    }
  }
  if (idle == nullptr) return TierLookupStatus::busy;
  const bool started =
      idle->start(std::span<const std::uint64_t>(chain_).subspan(first_block, blocks_end - first_block), first_block);
  AK_ASSERT(started, "redis tier: an idle lookup starts");
  return TierLookupStatus::reading;
}

bool RedisTier::attach(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end,
                       std::span<const std::span<std::byte>> layer_segments, std::uint32_t from_token, std::uint32_t slot) {
  AK_ASSERT(layer_segments.size() == settings_.geometry.dense_layers, "redis tier: one segment per dense layer");
  blocks_end = std::min<std::uint32_t>(blocks_end, static_cast<std::uint32_t>(chain_.size()));
  if (blocks_end <= first_block) return false;
  chain_of(prompt, blocks_end);
  const std::size_t i = find(blocks_end);
  if (i == lookups_.size() || lookups_[i]->first_block() > first_block) return false;
  return lookups_[i]->attach(layer_segments, from_token, slot);
}

std::uint32_t RedisTier::ready_slot(std::span<const std::int32_t> prompt, std::uint32_t first_block,
                                    std::uint32_t blocks_end, std::uint32_t& from_token) {
  blocks_end = std::min<std::uint32_t>(blocks_end, static_cast<std::uint32_t>(chain_.size()));
  if (blocks_end <= first_block) return kTierNoSlot;
  chain_of(prompt, blocks_end);
  const std::size_t i = find(blocks_end);
  if (i == lookups_.size() || lookups_[i]->phase() != TierLookup::Phase::done || lookups_[i]->first_block() > first_block) {
    return kTierNoSlot;
  }
  from_token = lookups_[i]->from_token();
  return lookups_[i]->slot();
}

std::uint32_t RedisTier::adopt(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end,
                               std::span<std::byte> state, TierAdoptCut& cut) {
  cut = TierAdoptCut{first_block, first_block, first_block};
  blocks_end = std::min<std::uint32_t>(blocks_end, static_cast<std::uint32_t>(chain_.size()));
  if (blocks_end <= first_block) return first_block;
  chain_of(prompt, blocks_end);
  const std::size_t i = find(blocks_end);
  if (i == lookups_.size()) return first_block;
  TierLookup& l = *lookups_[i];
  if (l.phase() != TierLookup::Phase::done || l.first_block() > first_block) return first_block;
  // The run written (cut by the reader before it copied: tier_chain_cut), seen from first_block.
  const std::uint32_t base = l.first_block();
  cut.accepted_end = std::max(first_block, std::min(blocks_end, base + l.accepted()));
  cut.window_end = std::max(first_block, std::min(blocks_end, base + l.window_blocks()));
  const std::uint32_t end = std::max(first_block, std::min(blocks_end, base + l.usable_blocks()));
  cut.end = end;
  if (end > first_block && rule_.state && !state.empty()) {
    const std::span<const std::byte> s = l.result().views[end - 1 - base].state;
    AK_ASSERT(s.size() == state.size(), "redis tier: a restore ends at a block carrying the state");
    std::memcpy(state.data(), s.data(), s.size());
  }
  if (end > first_block) l.copy_window_rows();
  for (std::uint32_t b = first_block; b < end; ++b) remember(chain_[b]);
  l.consume();
  return end;
}

void RedisTier::abandon(std::span<const std::int32_t> prompt, std::uint32_t blocks_end) {
  blocks_end = std::min<std::uint32_t>(blocks_end, static_cast<std::uint32_t>(chain_.size()));
  if (blocks_end == 0) return;
  chain_of(prompt, blocks_end);
  if (const std::size_t i = find(blocks_end); i < lookups_.size()) lookups_[i]->abandon();
}

bool RedisTier::writing_into(std::uint32_t slot) const {
  for (const auto& l : lookups_) {
    if (l->writing_into(slot)) return true;
  }
  return false;
}

bool RedisTier::wait(std::uint32_t timeout_ms) {
  const std::chrono::milliseconds timeout(timeout_ms);
  for (auto& l : lookups_) {
    const TierLookup::Phase p = l->phase();
    if (p == TierLookup::Phase::reading || p == TierLookup::Phase::copying) return l->wait(timeout);
  }
  return writer_->wait_progress(timeout);
}

void RedisTier::drain() {
  for (auto& l : lookups_) {
    l->abandon();
    while (!l->wait(std::chrono::milliseconds(100))) {
    }
  }
  writer_->drain();
}

void RedisTier::offer(std::span<const std::int32_t> tokens, std::uint32_t length,
                      std::span<const std::span<const std::byte>> layer_segments, std::span<const TierState> states,
                      std::uint32_t lease) {
  offer_blocks(tokens, length, 0, layer_segments, states, lease, /*running=*/false);
}

void RedisTier::offer_running(std::span<const std::int32_t> tokens, std::uint32_t length, std::uint32_t first_block,
                              std::span<const std::span<const std::byte>> layer_segments,
                              std::span<const TierState> states, std::uint32_t lease) {
  offer_blocks(tokens, length, first_block, layer_segments, states, lease, /*running=*/true);
}

void RedisTier::offer_blocks(std::span<const std::int32_t> tokens, std::uint32_t length, std::uint32_t first_block,
                             std::span<const std::span<const std::byte>> layer_segments,
                             std::span<const TierState> states, std::uint32_t lease, bool running) {
  const std::uint32_t B = settings_.block_tokens;
  const Geometry& g = settings_.geometry;
  AK_ASSERT(layer_segments.size() == g.dense_layers, "redis tier: one segment per dense layer");
  AK_ASSERT(tokens.size() <= length, "redis tier: offered tokens have rows");
  const std::uint32_t blocks = tier_block_chain(tokens, settings_.page_tokens, B, settings_.model_identity, chain_);
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    const bool ring = g.kinds.is_window(l);
    AK_ASSERT(!ring || layer_segments[l].size() == std::uint64_t{rule_.ring_tokens} * g.row_bytes(),
              "redis tier: a window layer's segment is its ring");
    block_layers_[l] = TierRowSource{layer_segments[l].data(), ring ? rule_.ring_tokens : 0, 0};
  }
  // A ring holds the last ring_tokens rows written: tokens from `held` on.
  const std::uint32_t held = rule_.ring_tokens != 0 && length > rule_.ring_tokens ? length - rule_.ring_tokens : 0;
  for (std::uint32_t b = first_block; b < blocks; ++b) {
    if (known(chain_[b])) continue;
    TierBlockContent content;
    content.window_from = std::min(B, held > b * B ? held - b * B : 0);
    const std::byte* state = nullptr;
    for (const TierState& s : states) {
      if (s.token == (b + 1) * B && s.bytes != nullptr) state = s.bytes;
    }
    content.state = state != nullptr && g.recurrent_state_bytes != 0;
    const TierBlockIdentity id{settings_.model_identity, g, B, b, chain_[b]};
    std::array<char, kTierKeyBytes> key;  // no allocation on the engine thread
    const std::size_t n = tier_block_key_to(key, settings_.model_identity, g, chain_[b]);
    // Whole: every window row and (hybrids) the state. A block that is not is written only where the
    // key holds nothing (SET NX), so it never replaces a whole one another server or turn wrote, and
    // is not remembered: a later offer that has what it lacks writes it again (SET), whole.
    const bool whole = (rule_.window_tokens == 0 || content.window_from == 0) && (!rule_.state || content.state);
    const bool queued = writer_->submit(std::string_view(key.data(), n), id, block_layers_, content, state, lease,
                                        /*if_absent=*/!whole, /*copy_rings=*/running && rule_.ring_tokens != 0);
    if (queued && whole) remember(chain_[b]);
  }
}

}  // namespace activekv::tier
