// tier_lookup.hpp — one background lookup of a prompt's block chain, read and written into its history off the engine thread.
//
// The engine thread start()s a lookup of a prompt's block chain (the hashes of
// blocks first_block, first_block + 1, …) and goes on stepping; the reader
// thread runs read_tier_chain() on its own connection (one pipelined GET,
// stopping at the first miss, every value checked). A lookup may be given its
// destination — the host rows of a history the runtime reserved for the
// request — when it starts or later (attach()); the reader then copies the
// accepted blocks' rows straight into that history — the run cut first to the
// longest one a restore may end on (tier_chain_cut: window rows, states) — so the
// engine thread copies no full layer's row: admission adopts them. Window layers'
// rows (a window's worth) go into their rings' slots at adoption
// (copy_window_rows, engine thread), after admission's own ring copies (copy on
// adopt, the prefix cache), whose colliding slots they must win. A refused block ends the accepted run
// before it is copied, so nothing past it is ever adopted. A slow or dead store
// costs the reader its timeout, never the engine thread.
//
//   phase: idle → reading (start) → read (no destination yet) ─attach→ copying → done
//                           └─ (a destination attached while reading) ──────┘
//          any → idle by abandon(): at once when the reader is not in the rows
//          (idle, read, done), else when it leaves them (reading, copying).
//   The reader touches the destination only while reading or copying; until the
//   lookup is idle again the destination must stay reserved (writing_into()).
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

inline constexpr std::uint32_t kNoSlot = UINT32_MAX;

// Where a lookup writes: layer l's history segment is segments[l]; rows below from_token are not written.
struct TierDestination {
  std::vector<std::span<std::byte>> segments;  // [dense layers]
  std::uint32_t from_token = 0;
  std::uint32_t slot = kNoSlot;
};

class TierLookup {
 public:
  enum class Phase : std::uint8_t { idle, reading, read, copying, done };

  // `rule`: what a restore's end must carry (tier_reader.hpp); applied when the rows are copied.
  TierLookup(TierStoreConfig config, TierCounters* counters, std::uint64_t model_identity, const Geometry& geometry,
             std::uint32_t block_tokens, std::uint32_t max_blocks, TierCutRule rule = {});
  ~TierLookup();
  TierLookup(const TierLookup&) = delete;
  TierLookup& operator=(const TierLookup&) = delete;

  Phase phase() const noexcept { return phase_.load(std::memory_order_acquire); }
  // idle → reading: looks up `chain` (blocks first_block, …); false unless idle.
  bool start(std::span<const std::uint64_t> chain, std::uint32_t first_block);
  // reading or read: the accepted rows go into `segments` (one per dense layer) from token
  // `from_token` on; `slot` names the history for writing_into(). False in any other phase.
  bool attach(std::span<const std::span<std::byte>> segments, std::uint32_t from_token, std::uint32_t slot);
  // Lets the lookup go unused (see the phases above).
  void abandon() noexcept;
  // True while the reader may still write into history `slot` (reading or copying with it attached).
  bool writing_into(std::uint32_t slot) const noexcept;
  // While not idle: what was asked. While read or done: what was accepted (blocks from first_block).
  std::uint32_t first_block() const noexcept { return first_block_; }
  std::span<const std::uint64_t> chain() const noexcept { return {chain_.data(), chain_size_}; }
  std::uint64_t last_hash() const noexcept { return chain_size_ > 0 ? chain_[chain_size_ - 1] : 0; }
  std::uint32_t accepted() const noexcept { return read_.blocks; }
  // While done: the accepted run after the ring cut, and after the state cut too (what was written).
  std::uint32_t window_blocks() const noexcept { return read_.window_blocks; }
  std::uint32_t usable_blocks() const noexcept { return read_.usable_blocks; }
  const TierChainRead& result() const noexcept { return read_; }
  // The destination attached (slot kNoSlot: none). Engine thread.
  std::uint32_t slot() const noexcept;
  std::uint32_t from_token() const noexcept;
  // Done (engine thread, at adoption): the window layers' rows the run's end reads into the rings.
  void copy_window_rows() noexcept;
  void consume() noexcept;  // done → idle
  // Waits up to `timeout` while the reader works (reading or copying); true when it no longer does.
  bool wait(std::chrono::milliseconds timeout);
  // Tests: the lookups finished (read) and the copies made since construction.
  std::uint64_t finished() const noexcept { return finished_.load(std::memory_order_relaxed); }
  std::uint64_t copies() const noexcept { return copies_.load(std::memory_order_relaxed); }

 private:
  void run();
  void copy_accepted() noexcept;  // reader thread, phase copying
  void reset_locked() noexcept;   // → idle, no destination

  TierStore store_;  // the reader's own connection
  TierCounters* counters_;
  std::uint64_t model_identity_;
  Geometry geometry_;
  std::uint32_t block_tokens_;
  TierCutRule rule_;
  std::vector<std::uint64_t> chain_;  // [max blocks]
  std::size_t chain_size_ = 0;
  std::uint32_t first_block_ = 0;
  TierChainRead read_;
  TierDestination dest_;
  bool abandoned_ = false;
  std::atomic<Phase> phase_{Phase::idle};
  std::atomic<std::uint64_t> finished_{0}, copies_{0};
  bool stop_ = false;
  mutable std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::thread worker_;
};

}  // namespace activekv::tier
