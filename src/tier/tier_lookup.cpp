// tier_lookup.cpp — see tier_lookup.hpp.
#include "tier/tier_lookup.hpp"

#include <algorithm>
#include <cstring>

#include "activekv/assert.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::tier {

TierLookup::TierLookup(TierStoreConfig config, TierCounters* counters, std::uint64_t model_identity,
                       const Geometry& geometry, std::uint32_t block_tokens, std::uint32_t max_blocks, TierCutRule rule)
    : store_(std::move(config), counters),
      counters_(counters),
      model_identity_(model_identity),
      geometry_(geometry),
      block_tokens_(block_tokens),
      rule_(rule) {
  chain_.resize(max_blocks);
  read_.views.reserve(max_blocks);
  read_.keys.reserve(max_blocks);
  read_.values.reserve(max_blocks);
  dest_.segments.resize(geometry.dense_layers);
  worker_ = std::thread([this] { run(); });
}

TierLookup::~TierLookup() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();  // a read or copy in progress ends first
}

bool TierLookup::start(std::span<const std::uint64_t> chain, std::uint32_t first_block) {
  AK_ASSERT(chain.size() <= chain_.size(), "tier lookup: a chain longer than the max context");
  {
    std::lock_guard lock(mutex_);
    if (phase_.load(std::memory_order_relaxed) != Phase::idle) return false;
    std::copy(chain.begin(), chain.end(), chain_.begin());
    chain_size_ = chain.size();
    first_block_ = first_block;
    read_.blocks = 0;
    abandoned_ = false;
    dest_.slot = kNoSlot;
    phase_.store(Phase::reading, std::memory_order_release);
  }
  wake_.notify_one();
  return true;
}

bool TierLookup::attach(std::span<const std::span<std::byte>> segments, std::uint32_t from_token, std::uint32_t slot) {
  AK_ASSERT(segments.size() == dest_.segments.size(), "tier lookup: one destination segment per dense layer");
  {
    std::lock_guard lock(mutex_);
    const Phase p = phase_.load(std::memory_order_relaxed);
    if ((p != Phase::reading && p != Phase::read) || abandoned_ || dest_.slot != kNoSlot) return false;
    std::copy(segments.begin(), segments.end(), dest_.segments.begin());
    dest_.from_token = from_token;
    dest_.slot = slot;
    if (p == Phase::read) phase_.store(Phase::copying, std::memory_order_release);
  }
  wake_.notify_one();
  return true;
}

void TierLookup::reset_locked() noexcept {
  dest_.slot = kNoSlot;
  abandoned_ = false;
  phase_.store(Phase::idle, std::memory_order_release);
}

void TierLookup::abandon() noexcept {
  std::lock_guard lock(mutex_);
  const Phase p = phase_.load(std::memory_order_relaxed);
  if (p == Phase::reading || p == Phase::copying) {
    abandoned_ = true;  // the reader lets it go when it leaves the rows
  } else {
    reset_locked();
  }
}

bool TierLookup::writing_into(std::uint32_t slot) const noexcept {
  std::lock_guard lock(mutex_);
  const Phase p = phase_.load(std::memory_order_relaxed);
  return (p == Phase::reading || p == Phase::copying) && dest_.slot == slot;
}

std::uint32_t TierLookup::slot() const noexcept {
  std::lock_guard lock(mutex_);
  return dest_.slot;
}

std::uint32_t TierLookup::from_token() const noexcept {
  std::lock_guard lock(mutex_);
  return dest_.from_token;
}

void TierLookup::consume() noexcept {
  std::lock_guard lock(mutex_);
  if (phase_.load(std::memory_order_relaxed) == Phase::done) reset_locked();
}

bool TierLookup::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return done_.wait_for(lock, timeout, [&] {
    const Phase p = phase_.load(std::memory_order_acquire);
    return p != Phase::reading && p != Phase::copying;
  });
}

// The accepted blocks' full layers' rows, layer by layer, into the destination, up to the cut (rows
// below from_token skipped). Window layers' rows wait for copy_window_rows(), at adoption.
void TierLookup::copy_accepted() noexcept {
  tier_chain_cut(read_, rule_, block_tokens_, first_block_, dest_.from_token);
  const std::uint64_t row = geometry_.row_bytes();
  const std::uint32_t B = block_tokens_;
  for (std::uint32_t i = 0; i < read_.usable_blocks; ++i) {
    const std::uint32_t first_token = (first_block_ + i) * B;
    const TierBlockView& view = read_.views[i];
    for (std::uint32_t l = 0; l < geometry_.dense_layers; ++l) {
      if (geometry_.kinds.is_window(l)) continue;
      const std::span<std::byte> seg = dest_.segments[l];
      const std::span<const std::byte> rows = tier_block_layer(view, geometry_, B, l);
      const std::uint32_t from = std::max(first_token, dest_.from_token);
      if (from >= first_token + B) continue;
      AK_ASSERT(std::uint64_t{first_token + B} * row <= seg.size(), "tier lookup: a restored block fits the history");
      std::memcpy(seg.data() + std::uint64_t{from} * row, rows.data() + std::uint64_t{from - first_token} * row,
                  std::uint64_t{first_token + B - from} * row);
    }
  }
  copies_.fetch_add(1, std::memory_order_relaxed);
}

// The window layers' rows a query at the run's end reads, into their rings' slots (token t at
// t mod ring_tokens). At adoption, on the engine thread: after admission copied a local prefix's
// ring (copy on adopt, the host prefix cache), whose slots the same tokens' rows must win.
void TierLookup::copy_window_rows() noexcept {
  if (rule_.window_tokens == 0 || read_.usable_blocks == 0) return;
  const std::uint64_t row = geometry_.row_bytes();
  const std::uint32_t B = block_tokens_;
  const std::uint32_t ring = rule_.ring_tokens;
  const std::uint32_t window_first = tier_window_first(rule_, (first_block_ + read_.usable_blocks) * B);
  for (std::uint32_t i = 0; i < read_.usable_blocks; ++i) {
    const std::uint32_t first_token = (first_block_ + i) * B;
    const std::uint32_t from = std::max({first_token, window_first, dest_.from_token});
    if (from >= first_token + B) continue;
    const TierBlockView& view = read_.views[i];
    AK_ASSERT(from >= first_token + view.window_from, "tier lookup: a window row the cut let through");
    for (std::uint32_t l = 0; l < geometry_.dense_layers; ++l) {
      if (!geometry_.kinds.is_window(l)) continue;
      const std::span<std::byte> seg = dest_.segments[l];
      AK_ASSERT(ring != 0 && seg.size() == std::uint64_t{ring} * row, "tier lookup: a window layer's destination is its ring");
      const std::span<const std::byte> rows = tier_block_layer(view, geometry_, B, l);
      for (std::uint32_t t = from; t < first_token + B; ++t) {
        std::memcpy(seg.data() + std::uint64_t{t % ring} * row,
                    rows.data() + std::uint64_t{t - first_token - view.window_from} * row, row);
      }
    }
  }
}

void TierLookup::run() {
  testing::mark_io_thread();  // its allocations (hiredis replies) are not the step path's
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] {
      const Phase p = phase_.load(std::memory_order_relaxed);
      return stop_ || p == Phase::reading || p == Phase::copying;
    });
    if (stop_) return;
    if (phase_.load(std::memory_order_relaxed) == Phase::reading) {
      lock.unlock();
      read_tier_chain(store_, *counters_, model_identity_, geometry_, block_tokens_, chain(), read_, first_block_);
      lock.lock();
      finished_.fetch_add(1, std::memory_order_relaxed);
      if (abandoned_) {
        reset_locked();
      } else if (dest_.slot != kNoSlot) {
        phase_.store(Phase::copying, std::memory_order_release);  // copied below, on this thread
        continue;
      } else {
        phase_.store(Phase::read, std::memory_order_release);
      }
      done_.notify_all();
      continue;
    }
    // copying: the destination was attached (before or after the read); the engine thread does not
    // touch it (nor dest_) until this lookup is done or idle.
    lock.unlock();
    copy_accepted();
    lock.lock();
    if (abandoned_) {
      reset_locked();
    } else {
      phase_.store(Phase::done, std::memory_order_release);
    }
    done_.notify_all();
  }
}

}  // namespace activekv::tier
