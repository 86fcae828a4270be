// write_behind.hpp — blocks written to the tier by a background thread; the caller never waits.
//
// A fixed set of slots, each one whole block value (tier_block_bytes) and its
// key, all allocated in create(). submit() takes a free slot, lets the caller
// fill it (encode_tier_block from host rows), and queues it; when no slot is
// free — the store is slower than the blocks arrive — the block is dropped and
// counted (dropped_writes), and submit() returns at once. The worker thread
// SETs queued slots on its own connection and frees them; a failed SET is a
// dropped write too. The caller's thread does a bounded memcpy and a lock
// hand-off, never a network call.
//
//   free slots + queued slots + the slot being written = slots   (always)
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "activekv/result.hpp"
#include "tier/tier_store.hpp"

namespace activekv::tier {

class WriteBehind {
 public:
  // `slots` values of `value_bytes` each; refuses zero slots or bytes.
  static Result<std::unique_ptr<WriteBehind>> create(TierStoreConfig config, TierCounters* counters,
                                                     std::uint32_t slots, std::uint64_t value_bytes);
  ~WriteBehind();  // stops the worker; blocks still queued are dropped (counted)

  // Queues `key` with the value `fill` writes into its (value_bytes long) span.
  // false: no free slot, the block is dropped and counted.
  bool submit(std::string_view key, const std::function<void(std::span<std::byte>)>& fill);

  // Waits until nothing is queued or being written (tests and shutdown).
  void drain();
  std::uint32_t queued() const;

 private:
  WriteBehind(TierStoreConfig config, TierCounters* counters) : store_(std::move(config), counters), counters_(counters) {}
  void run();

  TierStore store_;  // the worker's own connection
  TierCounters* counters_;
  std::vector<std::vector<std::byte>> values_;
  std::vector<std::string> keys_;
  std::vector<std::uint32_t> free_;    // stack of free slots (capacity: slots)
  std::vector<std::uint32_t> queue_;   // ring of queued slots (capacity: slots)
  std::uint32_t head_ = 0, count_ = 0;
  bool writing_ = false, stop_ = false;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::thread worker_;
};

}  // namespace activekv::tier
