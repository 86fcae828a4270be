// tier_lookup.hpp — the tier's background reader: one chain lookup at a time, off the engine thread.
//
// The engine thread start()s a lookup of a prompt's block chain (the hashes of
// blocks first_block, first_block + 1, …) and goes on stepping; the reader
// thread runs read_tier_chain() on its own connection (one pipelined GET,
// stopping at the first miss, every value checked) and publishes the accepted
// run. A slow or dead store costs the reader its timeout, never the engine
// thread: until the result is published the request waits in admission, and a
// timeout or error is simply a shorter (or empty) run — a miss.
//
//   state: idle → running (start) → done (the reader published) → idle (consume)
//   the engine thread touches the result only while done; the reader only while running
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "activekv/geometry.hpp"
#include "tier/tier_reader.hpp"
#include "tier/tier_store.hpp"

namespace activekv::tier {

class TierLookup {
 public:
  enum class State : std::uint8_t { idle, running, done };

  TierLookup(TierStoreConfig config, TierCounters* counters, std::uint64_t model_identity, const Geometry& geometry,
             std::uint32_t block_tokens, std::uint32_t max_blocks);
  ~TierLookup();
  TierLookup(const TierLookup&) = delete;
  TierLookup& operator=(const TierLookup&) = delete;

  State state() const noexcept { return state_.load(std::memory_order_acquire); }
  // idle or done → running: looks up `chain` (blocks first_block, …); false while one runs.
  bool start(std::span<const std::uint64_t> chain, std::uint32_t first_block);
  // While done: what was asked and what was accepted.
  std::uint32_t first_block() const noexcept { return first_block_; }
  std::span<const std::uint64_t> chain() const noexcept { return {chain_.data(), chain_size_}; }
  const TierChainRead& result() const noexcept { return read_; }
  void consume() noexcept;  // done → idle
  // Waits up to `timeout` while running; true when no longer running.
  bool wait(std::chrono::milliseconds timeout);
  // Tests: the lookups finished since construction.
  std::uint64_t finished() const noexcept { return finished_.load(std::memory_order_relaxed); }

 private:
  void run();

  TierStore store_;  // the reader's own connection
  TierCounters* counters_;
  std::uint64_t model_identity_;
  Geometry geometry_;
  std::uint32_t block_tokens_;
  std::vector<std::uint64_t> chain_;  // [max blocks]
  std::size_t chain_size_ = 0;
  std::uint32_t first_block_ = 0;
  TierChainRead read_;
  std::atomic<State> state_{State::idle};
  std::atomic<std::uint64_t> finished_{0};
  bool stop_ = false;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::thread worker_;
};

}  // namespace activekv::tier
