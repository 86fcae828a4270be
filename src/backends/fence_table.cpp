// fence_table.cpp — slot bookkeeping for fences (see fence_table.hpp).
#include "backends/fence_table.hpp"

#include "activekv/assert.hpp"

namespace activekv {

FenceTable::FenceTable(std::uint32_t capacity) : slots_(capacity) {
  AK_ASSERT(capacity > 0, "a fence table needs at least one slot");
  for (std::uint32_t i = 0; i < capacity; ++i) slots_[i].next_free = i + 1;
  free_head_ = 0;
}

Fence FenceTable::open(QueueKind queue) {
  std::lock_guard lock(mutex_);
  if (free_head_ == capacity()) return Fence{};
  const std::uint32_t index = free_head_;
  Slot& slot = slots_[index];
  AK_ASSERT(!slot.live, "free-list slot is live");
  free_head_ = slot.next_free;
  slot.live = true;
  slot.holds = 1;
  slot.in_flight = true;
  slot.outcome = FenceOutcome::pending;
  slot.queue = queue;
  ++used_;
  ++pending_;
  ++opened_total_;
  return Fence{index, slot.generation};
}

bool FenceTable::current_locked(Fence fence) const {
  if (!fence.recorded() || fence.slot >= capacity()) return false;
  const Slot& slot = slots_[fence.slot];
  return slot.live && slot.generation == fence.generation;
}

bool FenceTable::current(Fence fence) const {
  std::lock_guard lock(mutex_);
  return current_locked(fence);
}

FenceOutcome FenceTable::outcome(Fence fence) const {
  std::lock_guard lock(mutex_);
  if (!current_locked(fence)) return FenceOutcome::unknown;
  return slots_[fence.slot].outcome;
}

QueueKind FenceTable::queue(Fence fence) const {
  std::lock_guard lock(mutex_);
  AK_ASSERT(current_locked(fence), "queue() of a stale or never-recorded fence");
  return slots_[fence.slot].queue;
}

bool FenceTable::queue_if_current(Fence fence, QueueKind* queue) const {
  std::lock_guard lock(mutex_);
  if (!current_locked(fence)) return false;
  *queue = slots_[fence.slot].queue;
  return true;
}

bool FenceTable::resolve(Fence fence, FenceOutcome outcome) {
  AK_ASSERT(is_resolved(outcome), "resolve() to pending");
  bool changed = false;
  {
    std::lock_guard lock(mutex_);
    if (!current_locked(fence)) return false;
    Slot& slot = slots_[fence.slot];
    if (slot.outcome == FenceOutcome::pending) {
      slot.outcome = outcome;
      --pending_;
      if (outcome == FenceOutcome::failed) ++failed_total_;
      if (outcome == FenceOutcome::unknown) ++unknown_total_;
      changed = true;
    }
    slot.in_flight = false;
    maybe_recycle_locked(fence.slot);
  }
  if (changed) resolved_.notify_all();
  return changed;
}

std::uint32_t FenceTable::resolve_all_pending_unknown() {
  std::uint32_t count = 0;
  {
    std::lock_guard lock(mutex_);
    for (std::uint32_t i = 0; i < capacity(); ++i) {
      Slot& slot = slots_[i];
      if (!slot.live) continue;
      if (slot.outcome == FenceOutcome::pending) {
        slot.outcome = FenceOutcome::unknown;
        ++unknown_total_;
        ++count;
      }
      slot.in_flight = false;
      maybe_recycle_locked(i);
    }
    pending_ = 0;
  }
  resolved_.notify_all();
  return count;
}

bool FenceTable::retain(Fence fence) {
  std::lock_guard lock(mutex_);
  if (!current_locked(fence)) return false;
  ++slots_[fence.slot].holds;
  return true;
}

void FenceTable::release(Fence fence) {
  std::lock_guard lock(mutex_);
  if (!current_locked(fence)) return;
  Slot& slot = slots_[fence.slot];
  AK_ASSERT(slot.holds > 0, "release_fence() without a hold");
  --slot.holds;
  maybe_recycle_locked(fence.slot);
}

void FenceTable::maybe_recycle_locked(std::uint32_t index) {
  Slot& slot = slots_[index];
  if (!slot.live || slot.holds > 0 || slot.in_flight || slot.outcome == FenceOutcome::pending) return;
  slot.live = false;
  slot.generation = slot.generation == UINT32_MAX ? 1 : slot.generation + 1;
  slot.next_free = free_head_;
  free_head_ = index;
  --used_;
  if (recycle_hook_ != nullptr) recycle_hook_(recycle_context_, index);
}

FenceOutcome FenceTable::wait(Fence fence, std::chrono::nanoseconds timeout) const {
  std::unique_lock lock(mutex_);
  // Saturate: nanoseconds::max() means "no deadline" and must not overflow.
  constexpr auto horizon = std::chrono::hours(24 * 365);
  const auto deadline = std::chrono::steady_clock::now() +
                        (timeout > horizon ? std::chrono::nanoseconds(horizon) : timeout);
  for (;;) {
    if (!current_locked(fence)) return FenceOutcome::unknown;
    const FenceOutcome outcome = slots_[fence.slot].outcome;
    if (is_resolved(outcome)) return outcome;
    if (resolved_.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (!current_locked(fence)) return FenceOutcome::unknown;
      return slots_[fence.slot].outcome;
    }
  }
}

void FenceTable::set_recycle_hook(RecycleHook hook, void* context) noexcept {
  std::lock_guard lock(mutex_);
  recycle_hook_ = hook;
  recycle_context_ = context;
}

std::uint32_t FenceTable::slots_used() const {
  std::lock_guard lock(mutex_);
  return used_;
}

std::uint32_t FenceTable::pending() const {
  std::lock_guard lock(mutex_);
  return pending_;
}

std::uint64_t FenceTable::failed_total() const {
  std::lock_guard lock(mutex_);
  return failed_total_;
}

std::uint64_t FenceTable::unknown_total() const {
  std::lock_guard lock(mutex_);
  return unknown_total_;
}

std::uint64_t FenceTable::opened_total() const {
  std::lock_guard lock(mutex_);
  return opened_total_;
}

}  // namespace activekv
