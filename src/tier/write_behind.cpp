// write_behind.cpp — see write_behind.hpp.
#include "tier/write_behind.hpp"

#include <cstring>

#include "activekv/assert.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::tier {

Result<std::unique_ptr<WriteBehind>> WriteBehind::create(TierStoreConfig config, TierCounters* counters,
                                                         std::uint32_t slots, std::uint64_t value_bytes,
                                                         std::uint32_t layers, std::uint64_t copy_bytes) {
  if (slots == 0) return make_error(ErrorCode::invalid_argument, "kv_tier.write_queue", "the write queue needs at least one block");
  if (value_bytes == 0) return make_error(ErrorCode::invalid_argument, "kv_tier.block_tokens", "a tier block holds at least one token");
  std::unique_ptr<WriteBehind> w(new WriteBehind(std::move(config), counters));
  w->jobs_.resize(slots);
  for (Job& job : w->jobs_) {
    job.key.reserve(64);
    job.layers.reserve(layers);
    job.copy.resize(copy_bytes);
  }
  w->value_.resize(value_bytes);
  w->scratch_.resize(layers);
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
  if (layer_rows.size() > scratch_.size()) {
    counters_->dropped_writes.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // scratch_ is the caller's (one engine thread); the job copies it.
  for (std::size_t l = 0; l < layer_rows.size(); ++l) scratch_[l] = TierRowSource{layer_rows[l].data(), 0, id.block_index * id.token_count};
  return submit(key, id, std::span<const TierRowSource>(scratch_.data(), layer_rows.size()), TierBlockContent{}, nullptr, lease);
}

bool WriteBehind::submit(std::string_view key, const TierBlockIdentity& id, std::span<const TierRowSource> layers,
                         TierBlockContent content, const std::byte* state, std::uint32_t lease, bool if_absent,
                         bool copy_rings) {
  const std::uint64_t row = id.geometry.row_bytes();
  const std::uint32_t B = id.token_count;
  std::uint64_t copied = 0;  // ring rows the job copies
  for (const TierRowSource& src : layers) copied += copy_rings && src.ring_tokens != 0 ? std::uint64_t{B} * row : 0;
  {
    std::lock_guard lock(mutex_);
    if (free_.empty() || stop_ || layers.size() > jobs_[0].layers.capacity() ||
        tier_block_bytes(id.geometry, id.token_count, content) > value_.size() || copied > jobs_[0].copy.size()) {
      counters_->dropped_writes.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    Job& job = jobs_[slot];
    job.key.assign(key);  // within the reserved 64 characters: no allocation
    job.id = id;
    job.layers.assign(layers.begin(), layers.end());
    job.content = content;
    job.state = state;
    job.lease = lease;
    job.if_absent = if_absent;
    job.busy = true;
    if (copied != 0) copy_ring_rows(job, std::min(content.window_from, B));
    queue_[(head_ + count_) % queue_.size()] = slot;
    ++count_;
  }
  wake_.notify_one();
  return true;
}

// The job's ring sources become segments in its own buffer: window layer w's rows of the block's
// tokens [window_from, B) at copy + (w × B + t) × row bytes (t block-relative), copied now, while
// the caller holds the rows (between steps); the worker reads only the copy.
void WriteBehind::copy_ring_rows(Job& job, std::uint32_t window_from) noexcept {
  const std::uint64_t row = job.id.geometry.row_bytes();
  const std::uint32_t B = job.id.token_count;
  const std::uint64_t first = std::uint64_t{job.id.block_index} * B;
  std::uint32_t w = 0;
  for (TierRowSource& src : job.layers) {
    if (src.ring_tokens == 0) continue;
    std::byte* dst = job.copy.data() + std::uint64_t{w++} * B * row;
    AK_ASSERT(std::uint64_t{w} * B * row <= job.copy.size(), "write-behind: the ring rows fit the job's copy buffer");
    for (std::uint64_t t = first + window_from; t < first + B;) {
      const std::uint64_t slot = t % src.ring_tokens;
      const std::uint64_t run = std::min(first + B - t, src.ring_tokens - slot);
      std::memcpy(dst + (t - first) * row, src.base + slot * row, run * row);
      t += run;
    }
    src = TierRowSource{dst, 0, static_cast<std::uint32_t>(first)};
  }
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
    const std::size_t bytes = encode_tier_block(job.id, job.layers, job.content, job.state, value_);
    switch (store_.put(job.key, std::span<const std::byte>(value_).first(bytes), job.if_absent)) {
      case TierStore::Put::stored: counters_->writes.fetch_add(1, std::memory_order_relaxed); break;
      case TierStore::Put::kept: counters_->kept_writes.fetch_add(1, std::memory_order_relaxed); break;
      case TierStore::Put::failed: counters_->dropped_writes.fetch_add(1, std::memory_order_relaxed); break;
    }
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
  if (layer >= job.layers.size()) return {};
  const TierRowSource& src = job.layers[layer];
  const std::uint64_t row = job.id.geometry.row_bytes();
  const std::uint32_t first = job.id.block_index * job.id.token_count;
  if (src.ring_tokens != 0) return {src.base + std::uint64_t{first % src.ring_tokens} * row, row};
  return {src.base + std::uint64_t{first - src.first_token} * row, std::uint64_t{job.id.token_count} * row};
}

void WriteBehind::pause(bool paused) {
  {
    std::lock_guard lock(mutex_);
    paused_ = paused;
  }
  wake_.notify_all();
}

}  // namespace activekv::tier
