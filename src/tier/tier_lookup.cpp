// tier_lookup.cpp — see tier_lookup.hpp.
#include "tier/tier_lookup.hpp"

#include "activekv/assert.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::tier {

TierLookup::TierLookup(TierStoreConfig config, TierCounters* counters, std::uint64_t model_identity,
                       const Geometry& geometry, std::uint32_t block_tokens, std::uint32_t max_blocks)
    : store_(std::move(config), counters),
      counters_(counters),
      model_identity_(model_identity),
      geometry_(geometry),
      block_tokens_(block_tokens) {
  chain_.resize(max_blocks);
  read_.keys.reserve(max_blocks);
  read_.values.reserve(max_blocks);
  worker_ = std::thread([this] { run(); });
}

TierLookup::~TierLookup() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool TierLookup::start(std::span<const std::uint64_t> chain, std::uint32_t first_block) {
  AK_ASSERT(chain.size() <= chain_.size(), "tier lookup: a chain longer than the max context");
  {
    std::lock_guard lock(mutex_);
    if (state_.load(std::memory_order_relaxed) == State::running) return false;
    std::copy(chain.begin(), chain.end(), chain_.begin());
    chain_size_ = chain.size();
    first_block_ = first_block;
    state_.store(State::running, std::memory_order_release);
  }
  wake_.notify_one();
  return true;
}

void TierLookup::consume() noexcept {
  State expected = State::done;
  state_.compare_exchange_strong(expected, State::idle, std::memory_order_acq_rel);
}

bool TierLookup::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return done_.wait_for(lock, timeout, [&] { return state_.load(std::memory_order_acquire) != State::running; });
}

void TierLookup::run() {
  testing::mark_io_thread();  // its allocations (hiredis replies) are not the step path's
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || state_.load(std::memory_order_relaxed) == State::running; });
    if (stop_) return;
    lock.unlock();
    read_tier_chain(store_, *counters_, model_identity_, geometry_, block_tokens_, chain(), read_, first_block_);
    lock.lock();
    finished_.fetch_add(1, std::memory_order_relaxed);
    state_.store(State::done, std::memory_order_release);
    done_.notify_all();
  }
}

}  // namespace activekv::tier
