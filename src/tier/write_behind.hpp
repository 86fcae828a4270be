// write_behind.hpp — blocks written to the tier by a background thread that reads host memory under a lease.
//
// The caller (the runtime, between steps) never copies a block and never waits:
// submit() records a block's identity, key, the host rows it lives in (one
// row source per dense layer: a segment or a ring), which window rows it carries
// and, for a hybrid, where its state is, in a free job slot, tagged with a lease (the history
// the rows belong to), and returns. The worker thread encodes the value from
// those rows into its own buffer (header, checksum, payload) and SETs it on its
// own connection. The caller must keep the rows unchanged while
// lease_held(lease) is true — the runtime keeps the history off its free list
// (BudgetManager::hold_history) until then, so it cannot be recycled under the
// worker. A running history's window layers move on (their rings are rewritten
// as the context grows), so a block offered while its history runs has those
// rows copied into the job's own buffer at submit (`copy_rings`); its full
// layers' rows below the length never change and are read in place. A block
// that lacks some of what a restore needs is stored only where the key holds
// nothing (`if_absent`: SET NX), so it never replaces a complete one (counted as
// kept_writes when the key held a value). When no job slot is free (the store is slower than blocks arrive),
// the block is dropped and counted (dropped_writes); a failed SET is a dropped
// write too.
//
//   free slots + queued slots + the slot being written = slots   (always)
//   a lease is held while a slot tagged with it is queued or being written
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "activekv/result.hpp"
#include "tier/tier_block.hpp"
#include "tier/tier_store.hpp"

namespace activekv::tier {

class WriteBehind {
 public:
  // `slots` jobs; blocks of at most `value_bytes` (header + payload: tier_block_bytes_max) over `layers` dense layers;
  // each job holds `copy_bytes` for a running history's window rows (window layers × block_tokens × row bytes; 0: none).
  static Result<std::unique_ptr<WriteBehind>> create(TierStoreConfig config, TierCounters* counters,
                                                     std::uint32_t slots, std::uint64_t value_bytes, std::uint32_t layers,
                                                     std::uint64_t copy_bytes = 0);
  ~WriteBehind();  // stops the worker; blocks still queued are dropped (counted)

  // Queues block `id` under `key`, to be encoded by the worker from `layer_rows` (read under `lease`).
  // false: no free slot, the block is dropped and counted. Allocation-free after create().
  bool submit(std::string_view key, const TierBlockIdentity& id, std::span<const std::span<const std::byte>> layer_rows,
              std::uint32_t lease);
  // The same from row sources (tier_block.hpp), carrying `content` (window rows, the state at `state`).
  // `if_absent`: stored only where the key holds nothing (a block lacking window rows or its state).
  // `copy_rings`: the ring sources' rows are copied into the job now (their history still runs);
  // dropped and counted when they do not fit the job's copy buffer.
  bool submit(std::string_view key, const TierBlockIdentity& id, std::span<const TierRowSource> layers,
              TierBlockContent content, const std::byte* state, std::uint32_t lease, bool if_absent = false,
              bool copy_rings = false);
  // True while a block submitted under `lease` is queued or being written.
  bool lease_held(std::uint32_t lease) const;
  // Waits up to `timeout` for a slot to be written (any); true if one was.
  bool wait_progress(std::chrono::milliseconds timeout);

  // Waits until nothing is queued or being written (tests and shutdown).
  void drain();
  std::uint32_t queued() const;
  // Tests: while paused the worker takes no job (so a lease stays held).
  void pause(bool paused);
  // Tests: the rows of layer `layer` the k-th queued job will read (empty if none).
  std::span<const std::byte> queued_rows(std::uint32_t k, std::uint32_t layer) const;

 private:
  struct Job {
    std::string key;
    TierBlockIdentity id{};
    std::vector<TierRowSource> layers;  // [dense layers], reserved in create()
    TierBlockContent content{};
    const std::byte* state = nullptr;
    std::uint32_t lease = 0;
    bool if_absent = false;                          // SET NX: a less complete block never replaces one stored
    bool busy = false;                               // queued or being written
    std::vector<std::byte> copy;                     // [window layers × block_tokens × row bytes], from create()
  };
  WriteBehind(TierStoreConfig config, TierCounters* counters) : store_(std::move(config), counters), counters_(counters) {}
  void run();
  static void copy_ring_rows(Job& job, std::uint32_t window_from) noexcept;

  TierStore store_;  // the worker's own connection
  TierCounters* counters_;
  std::vector<Job> jobs_;
  std::vector<std::byte> value_;       // the worker's encoding buffer (the largest value)
  std::vector<TierRowSource> scratch_; // [dense layers]: submit()'s spans as row sources
  std::vector<std::uint32_t> free_;    // stack of free slots (capacity: slots)
  std::vector<std::uint32_t> queue_;   // ring of queued slots (capacity: slots)
  std::uint32_t head_ = 0, count_ = 0;
  std::uint64_t written_ = 0;          // slots finished (stored or dropped), for wait_progress
  bool writing_ = false, stop_ = false, paused_ = false;
  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::thread worker_;
};

}  // namespace activekv::tier
