// write_behind.cpp — see write_behind.hpp.
#include "tier/write_behind.hpp"

#include "activekv/assert.hpp"

namespace activekv::tier {

Result<std::unique_ptr<WriteBehind>> WriteBehind::create(TierStoreConfig config, TierCounters* counters,
                                                         std::uint32_t slots, std::uint64_t value_bytes) {
  if (slots == 0) return make_error(ErrorCode::invalid_argument, "kv_tier.write_queue", "the write queue needs at least one block");
  if (value_bytes == 0) return make_error(ErrorCode::invalid_argument, "kv_tier.block_tokens", "a tier block holds at least one token");
  std::unique_ptr<WriteBehind> w(new WriteBehind(std::move(config), counters));
  w->values_.resize(slots);
  w->keys_.resize(slots);
  for (std::uint32_t s = 0; s < slots; ++s) {
    w->values_[s].resize(value_bytes);
    w->keys_[s].reserve(64);
  }
  w->queue_.assign(slots, 0);
  w->free_.reserve(slots);
  for (std::uint32_t s = slots; s-- > 0;) w->free_.push_back(s);
  w->worker_ = std::thread([p = w.get()] { p->run(); });
  return w;
}

WriteBehind::~WriteBehind() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool WriteBehind::submit(std::string_view key, const std::function<void(std::span<std::byte>)>& fill) {
  std::uint32_t slot;
  {
    std::lock_guard lock(mutex_);
    if (free_.empty() || stop_) {
      counters_->dropped_writes.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    slot = free_.back();
    free_.pop_back();
  }
  // The slot is the caller's alone until queued: fill it outside the lock.
  keys_[slot].assign(key);
  fill(values_[slot]);
  {
    std::lock_guard lock(mutex_);
    queue_[(head_ + count_) % queue_.size()] = slot;
    ++count_;
  }
  wake_.notify_one();
  return true;
}

void WriteBehind::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || count_ > 0; });
    if (stop_) {
      counters_->dropped_writes.fetch_add(count_, std::memory_order_relaxed);
      count_ = 0;
      idle_.notify_all();
      return;
    }
    const std::uint32_t slot = queue_[head_];
    head_ = static_cast<std::uint32_t>((head_ + 1) % queue_.size());
    --count_;
    writing_ = true;
    lock.unlock();
    const bool stored = store_.put(keys_[slot], values_[slot]);
    (stored ? counters_->writes : counters_->dropped_writes).fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    writing_ = false;
    free_.push_back(slot);
    AK_ASSERT(free_.size() + count_ <= values_.size(), "write-behind: free + queued slots exceed the slots");
    if (count_ == 0) idle_.notify_all();
  }
}

void WriteBehind::drain() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return (count_ == 0 && !writing_) || stop_; });
}

std::uint32_t WriteBehind::queued() const {
  std::lock_guard lock(mutex_);
  return count_;
}

}  // namespace activekv::tier
