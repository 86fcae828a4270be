// redis_tier.hpp — the KV runtime's tier port (kv_tier.hpp) on Redis: restore by a pipelined read, offer by write-behind.
//
// lookup() starts a background lookup (tier_lookup.hpp: one pipelined GET of
// the prompt's block keys past the local prefix on a reader's own connection,
// every value checked); `lookups` of them run at once, one reader thread and
// connection each, so queued requests are looked up while they wait. attach()
// gives a lookup the reserved history its reader copies the accepted rows
// into; adopt() only reports the run — the engine thread never waits on the
// network and never copies a restored row (a hybrid's state at the end, one copy, is the
// exception). offer() hands each whole block not yet known to be in
// the tier to the write-behind worker (write_behind.hpp), which reads the
// history's rows under the caller's lease, encodes and SETs them.
// "Known to be in the tier" is a direct-mapped table of recent chain hashes
// (written or restored here), so a conversation's prefix is not written again
// every turn; a forgotten entry only costs one redundant SET. offer_running()
// writes a running history's blocks as it crosses their ends (window-layer
// models), copying their ring rows at once. A block missing window rows or its
// state is written with SET NX: it never replaces a block already stored under
// its key, which is at least as complete (docs/TIER.md, "Written while running").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "activekv/geometry.hpp"
#include "activekv/kv_tier.hpp"
#include "activekv/result.hpp"
#include "tier/tier_lookup.hpp"
#include "tier/tier_reader.hpp"
#include "tier/tier_store.hpp"
#include "tier/write_behind.hpp"

namespace activekv::tier {

struct RedisTierSettings {
  TierStoreConfig store;                   // from kv_tier's url and timeouts
  std::uint32_t block_tokens = 256;        // a whole number of page_tokens
  std::uint32_t write_queue_blocks = 8;    // write-behind slots; more blocks than this in flight are dropped
  std::uint32_t lookups = 2;               // lookups at once (prefetch of queued requests), a reader thread each
  std::uint32_t page_tokens = 0;           // the runtime's page size (the prefix chain's unit)
  std::uint32_t max_context_tokens = 0;
  std::uint64_t model_identity = 0;
  Geometry geometry{};
};

class RedisTier final : public KvTierPort {
 public:
  // Refuses a block that is not a whole number of pages, naming kv_tier.block_tokens.
  static Result<std::unique_ptr<RedisTier>> create(const RedisTierSettings& settings);

  std::uint32_t block_tokens() const noexcept override { return settings_.block_tokens; }
  TierLookupStatus lookup(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end,
                          bool evict) override;
  bool attach(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end,
              std::span<const std::span<std::byte>> layer_segments, std::uint32_t from_token, std::uint32_t slot) override;
  std::uint32_t ready_slot(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end,
                           std::uint32_t& from_token) override;
  std::uint32_t adopt(std::span<const std::int32_t> prompt, std::uint32_t first_block, std::uint32_t blocks_end,
                      std::span<std::byte> state, TierAdoptCut& cut) override;
  void abandon(std::span<const std::int32_t> prompt, std::uint32_t blocks_end) override;
  bool writing_into(std::uint32_t slot) const override;
  void offer(std::span<const std::int32_t> tokens, std::uint32_t length,
             std::span<const std::span<const std::byte>> layer_segments, std::span<const TierState> states,
             std::uint32_t lease) override;
  void offer_running(std::span<const std::int32_t> tokens, std::uint32_t length, std::uint32_t first_block,
                     std::span<const std::span<const std::byte>> layer_segments, std::span<const TierState> states,
                     std::uint32_t lease) override;
  // A window layer's host ring (memory_plan.hpp's formula; 0 without window layers).
  std::uint32_t ring_tokens() const noexcept { return rule_.ring_tokens; }
  bool lease_held(std::uint32_t lease) const override { return writer_->lease_held(lease); }
  bool wait(std::uint32_t timeout_ms) override;

  const TierCounters& counters() const noexcept { return counters_; }
  // Tests, shutdown: every lookup let go and its reader out of the rows, every write ended. The host
  // pool may go after this returns.
  void drain();
  WriteBehind& writer() noexcept { return *writer_; }  // tests
  std::uint32_t lookups() const noexcept { return static_cast<std::uint32_t>(lookups_.size()); }
  TierLookup& lookup_at(std::uint32_t i) noexcept { return *lookups_[i]; }  // tests

 private:
  explicit RedisTier(const RedisTierSettings& settings) : settings_(settings) {}
  bool known(std::uint64_t chain_hash) const noexcept;
  void remember(std::uint64_t chain_hash) noexcept;
  std::uint32_t chain_of(std::span<const std::int32_t> prompt, std::uint32_t blocks_end);
  // The lookup (not idle) of the chain in chain_ ending at blocks_end; lookups_.size() when none.
  std::size_t find(std::uint32_t blocks_end) const noexcept;
  void offer_blocks(std::span<const std::int32_t> tokens, std::uint32_t length, std::uint32_t first_block,
                    std::span<const std::span<const std::byte>> layer_segments, std::span<const TierState> states,
                    std::uint32_t lease, bool running);

  RedisTierSettings settings_;
  TierCounters counters_;
  std::vector<std::unique_ptr<TierLookup>> lookups_;
  std::unique_ptr<WriteBehind> writer_;
  std::vector<std::uint64_t> chain_;     // [max_context / block_tokens] scratch
  std::vector<std::uint64_t> known_;     // direct-mapped: recent chain hashes in the tier (0: empty)
  std::vector<TierRowSource> block_layers_;  // [dense layers] scratch
  TierCutRule rule_;
};

}  // namespace activekv::tier
