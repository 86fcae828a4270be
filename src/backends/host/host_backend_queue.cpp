// host_backend_queue.cpp — running a host backend queue's commands: executing one, propagating a
// wait's outcome, retiring finished commands from the head, the worker thread's loop, and the
// host-side waits, drains and holds.
//
// Invariants (with the locking rules in host_backend.cpp): a wait that resolved failed or unknown
// poisons the next command after it that is not a wait (or the next one pushed), so no command runs
// on inputs that did not land; commands retire only from the head, in ring order, so ring slots,
// the region ring and attention jobs are reused only after their command finished.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "backends/fence_table.hpp"
#include "backends/host/host_backend.hpp"

namespace activekv::host {

FenceOutcome HostBackend::execute(Queue& q, Command& command, bool threaded, bool here) {
  if (command.kind == Kind::wait) {
    // The awaited outcome; the caller passes a failure on to the next command.
    return threaded ? fences().wait(command.awaited, std::chrono::nanoseconds::max()) : fences().outcome(command.awaited);
  }
  if (command.poisoned != FenceOutcome::signalled) {
    if (!threaded) ++faults_.poisoned;
    return command.poisoned;
  }
  if (command.kind == Kind::marker) return FenceOutcome::signalled;  // the caller folds in q.worst
  const bool is_copy = command.kind != Kind::attention;
  switch (command.fault) {
    case Fault::failed_copy:
      apply_copy(q, command, command.torn_fraction);
      return FenceOutcome::failed;
    case Fault::failed_fence:
    case Fault::none:
      if (is_copy) {
        apply_copy(q, command, 1000);
      } else {
        apply_attention(command, threaded, here);
      }
      return command.fault == Fault::none ? FenceOutcome::signalled : FenceOutcome::failed;
    case Fault::unknown_fence:
      if (command.effect_on_unknown) {
        if (is_copy) {
          apply_copy(q, command, 1000);
        } else {
          apply_attention(command, threaded, here);
        }
      }
      return FenceOutcome::unknown;
  }
  return FenceOutcome::unknown;
}

void HostBackend::propagate(Queue& q, std::uint64_t wait_position, FenceOutcome awaited) {
  if (awaited != FenceOutcome::failed && awaited != FenceOutcome::unknown) return;
  for (std::uint64_t p = wait_position + 1; p < q.tail; ++p) {
    Command& next = q.ring[p % q.ring.size()];
    if (next.kind == Kind::wait) continue;
    next.poisoned = worse_outcome(next.poisoned, awaited);
    return;
  }
  q.poison = worse_outcome(q.poison, awaited);  // for the next command pushed
}

void HostBackend::retire(Queue& q) {
  while (q.head < q.tail) {
    Command& command = q.ring[q.head % q.ring.size()];
    if (!command.done) break;
    if (command.kind != Kind::wait) q.worst = worse_outcome(q.worst, command.outcome);
    if (command.kind == Kind::wait) fences().release(command.awaited);
    q.retired_done_at = std::max(q.retired_done_at, command.done_at);
    if (command.kind == Kind::wait) q.retired_waits_done_at = std::max(q.retired_waits_done_at, command.done_at);
    if (command.kind == Kind::attention) free_jobs_.push_back(command.job);
    if (command.kind == Kind::copy) q.region_head = std::max(q.region_head, command.region_end);
    ++q.head;
  }
  if (q.head == q.tail) q.region_head = q.region_tail;
}

void HostBackend::worker_loop(Queue& q) {
  std::unique_lock lock(mutex_);
  for (;;) {
    // head == dispatched: every command taken so far has retired — including
    // one its caller runs itself (run_here), so the queue stays in order.
    q.work.wait(lock, [&] { return stop_ || (!q.held && q.dispatched < q.tail && q.head == q.dispatched); });
    if (stop_) return;
    const std::uint64_t position = q.dispatched++;
    Command command = q.ring[position % q.ring.size()];
    const FenceOutcome worst_before = q.worst;
    const bool skip = lost();
    lock.unlock();
    FenceOutcome outcome = skip ? FenceOutcome::unknown : execute(q, command, true);
    if (command.kind == Kind::marker) outcome = worse_outcome(outcome, worst_before);
    if (command.fence.recorded()) fences().resolve(command.fence, outcome);
    lock.lock();
    Command& slot = q.ring[position % q.ring.size()];
    slot.done = true;
    slot.outcome = command.kind == Kind::wait ? FenceOutcome::signalled : outcome;
    if (command.kind == Kind::wait) propagate(q, position, outcome);
    retire(q);
  }
}

std::uint32_t HostBackend::outstanding() const {
  std::lock_guard lock(mutex_);
  std::uint64_t count = 0;
  for (const Queue& q : queues_) {
    for (std::uint64_t p = q.head; p < q.tail; ++p) count += q.ring[p % q.ring.size()].done ? 0 : 1;
  }
  return static_cast<std::uint32_t>(count);
}

FenceOutcome HostBackend::do_query(Fence fence) { return fences().outcome(fence); }

Result<FenceOutcome> HostBackend::do_wait_host(Fence fence, std::chrono::nanoseconds timeout) {
  if (!options_.deterministic) return fences().wait(fence, timeout);
  std::lock_guard lock(mutex_);
  for (;;) {
    const FenceOutcome outcome = fences().outcome(fence);
    if (is_resolved(outcome)) return outcome;
    std::uint64_t due;
    Queue* q = nullptr;
    std::uint64_t position;
    if (!next_event(&due, &q, &position)) {
      return make_error(ErrorCode::refused, "",
                        "wait_host would wait forever: nothing on any queue can make progress (a held queue, or "
                        "a wait on a fence that cannot resolve)");
    }
    run_until(due);
  }
}

Status HostBackend::do_synchronize(QueueKind kind) {
  Result<Fence> marker = do_record(kind);
  if (!marker.ok()) return marker.error();
  ++stats_.fences_recorded;
  Result<FenceOutcome> outcome = do_wait_host(marker.value(), std::chrono::nanoseconds::max());
  release_fence(marker.value());
  if (!outcome.ok()) return outcome.error();
  if (outcome.value() != FenceOutcome::signalled) {
    return make_error(ErrorCode::backend, "",
                      fmt::format("the {} queue drained with a {} fence", queue_kind_name(kind),
                                  fence_outcome_name(outcome.value())));
  }
  return Status::success();
}

Status HostBackend::do_hold_queue(QueueKind kind, bool hold) {
  {
    std::lock_guard lock(mutex_);
    Queue& q = queue(kind);
    q.held = hold;
    if (!hold) q.released_at = now_;
  }
  if (!options_.deterministic) queue(kind).work.notify_all();
  return Status::success();
}

}  // namespace activekv::host
