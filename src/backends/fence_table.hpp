// fence_table.hpp — the slots behind Fence handles, shared by every backend.
//
// A fence slot lives while anyone holds it:
//
//   holds     the caller's references (one per returned handle, more by retain)
//   in_flight the enqueued work's own hold, dropped when the work resolves it
//
// A slot is recycled (generation + 1, back on the free list) only when it has
// no holds, is not in flight, and is resolved. So a handle whose generation
// matches its slot always reads that fence's true outcome; a handle whose
// generation does not match is stale and reads `unknown`, never `signalled`.
//
// Outcomes only move pending -> resolved, once. A device loss turns every
// pending fence unknown at once and drops every in-flight hold (the work will
// never report; if a worker still does, its resolve finds a different
// generation or a resolved fence and changes nothing).
//
// All slots are allocated in the constructor; open/retain/release/resolve take
// a mutex and never allocate. waiters block on one condition variable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "activekv/fence.hpp"

namespace activekv {

class FenceTable {
 public:
  using RecycleHook = void (*)(void* context, std::uint32_t slot);

  explicit FenceTable(std::uint32_t capacity);

  // A pending fence on `queue`, with one caller hold and the in-flight hold.
  // Answers a never-recorded Fence{} when every slot is busy.
  Fence open(QueueKind queue);

  bool current(Fence fence) const;
  // unknown for never-recorded and stale handles.
  FenceOutcome outcome(Fence fence) const;
  // The queue the fence was recorded on (fence must be current).
  QueueKind queue(Fence fence) const;
  bool queue_if_current(Fence fence, QueueKind* queue) const;

  // The work's report: sets the outcome if still pending and drops the
  // in-flight hold. A stale handle is ignored. Returns true if it changed the outcome.
  bool resolve(Fence fence, FenceOutcome outcome);
  // Device loss: every pending fence becomes unknown. Returns how many.
  std::uint32_t resolve_all_pending_unknown();

  bool retain(Fence fence);   // false for stale / never recorded
  void release(Fence fence);  // ignores stale handles

  // Blocks until the fence resolves or the deadline passes; returns its outcome.
  FenceOutcome wait(Fence fence, std::chrono::nanoseconds timeout) const;

  void set_recycle_hook(RecycleHook hook, void* context) noexcept;

  std::uint32_t capacity() const noexcept { return static_cast<std::uint32_t>(slots_.size()); }
  std::uint32_t slots_used() const;
  std::uint32_t pending() const;
  std::uint64_t failed_total() const;
  std::uint64_t unknown_total() const;
  std::uint64_t opened_total() const;

 private:
  struct Slot {
    std::uint32_t generation = 1;  // the next handle's generation; never 0
    std::uint32_t holds = 0;
    std::uint32_t next_free = 0;   // free-list link
    bool live = false;             // opened and not yet recycled
    bool in_flight = false;
    FenceOutcome outcome = FenceOutcome::pending;
    QueueKind queue = QueueKind::compute;
  };

  bool current_locked(Fence fence) const;
  void maybe_recycle_locked(std::uint32_t index);

  mutable std::mutex mutex_;
  mutable std::condition_variable resolved_;
  std::vector<Slot> slots_;
  std::uint32_t free_head_ = 0;  // index of the first free slot, capacity() when none
  std::uint32_t used_ = 0;
  std::uint32_t pending_ = 0;
  std::uint64_t failed_total_ = 0;
  std::uint64_t unknown_total_ = 0;
  std::uint64_t opened_total_ = 0;
  RecycleHook recycle_hook_ = nullptr;
  void* recycle_context_ = nullptr;
};

}  // namespace activekv
