// write_behind.cpp — see write_behind.hpp.
#include "tier/write_behind.hpp"

#include "activekv/assert.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::tier {

Result<std::unique_ptr<WriteBehind>> WriteBehind::create(TierStoreConfig config, TierCounters* counters,
                                                         std::uint32_t slots, std::uint64_t value_bytes,
                                                         std::uint32_t layers) {
  if (slots == 0) return make_error(ErrorCode::invalid_argument, "kv_tier.write_queue", "the write queue needs at least one block");
  if (value_bytes == 0) return make_error(ErrorCode::invalid_argument, "kv_tier.block_tokens", "a tier block holds at least one token");
  std::unique_ptr<WriteBehind> w(new WriteBehind(std::move(config), counters));
  w->jobs_.resize(slots);
  for (Job& job : w->jobs_) {
    job.key.reserve(64);
    job.layers.reserve(layers);
  }
  w->value_.resize(value_bytes);
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

bool WriteBehind::submit(std::string_view key, const TierBlockIdentity& id,
                         std::span<const std::span<const std::byte>> layer_rows, std::uint32_t lease) {
  {
    std::lock_guard lock(mutex_);
    if (free_.empty() || stop_ || layer_rows.size() > jobs_[0].layers.capacity()) {
      counters_->dropped_writes.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    Job& job = jobs_[slot];
    job.key.assign(key);  // within the reserved 64 characters: no allocation
    job.id = id;
    job.layers.assign(layer_rows.begin(), layer_rows.end());
    job.lease = lease;
    job.busy = true;
    queue_[(head_ + count_) % queue_.size()] = slot;
    ++count_;
  }
  wake_.notify_one();
  return true;
}

bool WriteBehind::lease_held(std::uint32_t lease) const {
  std::lock_guard lock(mutex_);
  for (const Job& job : jobs_) {
    if (job.busy && job.lease == lease) return true;
  }
  return false;
}

bool WriteBehind::wait_progress(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const std::uint64_t before = written_;
  return idle_.wait_for(lock, timeout, [&] { return written_ != before || stop_; });
}

void WriteBehind::run() {
  testing::mark_io_thread();  // its allocations (hiredis) are not the step path's
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || (count_ > 0 && !paused_); });
    if (stop_) {
      counters_->dropped_writes.fetch_add(count_, std::memory_order_relaxed);
      for (Job& job : jobs_) job.busy = false;
      count_ = 0;
      idle_.notify_all();
      return;
    }
    const std::uint32_t slot = queue_[head_];
    head_ = static_cast<std::uint32_t>((head_ + 1) % queue_.size());
    --count_;
    writing_ = true;
    lock.unlock();
    Job& job = jobs_[slot];
    // Reads the history's rows under the job's lease: the history stays off the free list until
    // the job is free again, so nothing writes these rows meanwhile.
    encode_tier_block(job.id, job.layers, value_);
    const bool stored = store_.put(job.key, value_);
    (stored ? counters_->writes : counters_->dropped_writes).fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    writing_ = false;
    job.busy = false;
    free_.push_back(slot);
    ++written_;
    AK_ASSERT(free_.size() + count_ <= jobs_.size(), "write-behind: free + queued slots exceed the slots");
    idle_.notify_all();
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

std::span<const std::byte> WriteBehind::queued_rows(std::uint32_t k, std::uint32_t layer) const {
  std::lock_guard lock(mutex_);
  if (k >= count_) return {};
  const Job& job = jobs_[queue_[(head_ + k) % queue_.size()]];
  return layer < job.layers.size() ? job.layers[layer] : std::span<const std::byte>{};
}

void WriteBehind::pause(bool paused) {
  {
    std::lock_guard lock(mutex_);
    paused_ = paused;
  }
  wake_.notify_all();
}

}  // namespace activekv::tier
