// host_backend_clock.cpp — the host backend's virtual clock (the deterministic mode).
//
// Every command has a duration in ticks drawn from the seed; the clock advances
// to the next command that can start and finishes it there. Invariants: an
// in-order queue starts only its first unfinished command; with reorder,
// nothing after an unfinished wait starts; a wait is eligible only once its
// fence resolved, no earlier than the tick it resolved at. So the same seed
// gives the same order of completions on every machine. All under mutex_.
#include <algorithm>

#include "backends/fence_table.hpp"
#include "backends/host/host_backend.hpp"

namespace activekv::host {

bool HostBackend::eligible_at(const Queue& q, std::uint64_t position, std::uint64_t* at) const {
  const Command& command = q.ring[position % q.ring.size()];
  if (command.done || q.held) return false;
  const bool in_order = !options_.reorder;
  const bool waits_for_all = in_order || command.kind == Kind::marker;
  std::uint64_t t = std::max({command.enqueued_at, q.released_at, q.retired_waits_done_at,
                              waits_for_all ? q.retired_done_at : 0});
  for (std::uint64_t p = q.head; p < position; ++p) {
    const Command& earlier = q.ring[p % q.ring.size()];
    if (!waits_for_all && earlier.kind != Kind::wait) continue;
    if (!earlier.done) return false;
    t = std::max(t, earlier.done_at);
  }
  if (command.kind == Kind::wait) {
    if (!is_resolved(fences().outcome(command.awaited))) return false;
    *at = std::max(t, resolved_at_[command.awaited.slot]);
    return true;
  }
  *at = t + command.duration;
  return true;
}

// One pass per queue, front to back, carrying what the commands so far imply:
// an in-order queue can only start its first unfinished command; with reorder,
// nothing after an unfinished wait can start. So an event costs O(commands in
// flight), not O(commands²).
bool HostBackend::next_event(std::uint64_t* due, Queue** which, std::uint64_t* position) const {
  bool found = false;
  std::uint64_t best_due = 0, best_seq = 0;
  const bool in_order = !options_.reorder;
  for (const Queue& q : queues_) {
    if (q.held) continue;
    std::uint64_t done_all = q.retired_done_at;          // latest completion, every earlier command
    std::uint64_t done_waits = q.retired_waits_done_at;  // latest completion, earlier waits
    bool all_done = true;
    for (std::uint64_t p = q.head; p < q.tail; ++p) {
      const Command& command = q.ring[p % q.ring.size()];
      if (command.done) {
        done_all = std::max(done_all, command.done_at);
        if (command.kind == Kind::wait) done_waits = std::max(done_waits, command.done_at);
        continue;
      }
      const bool waits_for_all = in_order || command.kind == Kind::marker;
      bool eligible = !waits_for_all || all_done;
      std::uint64_t at = std::max({command.enqueued_at, q.released_at, done_waits, waits_for_all ? done_all : 0});
      if (eligible && command.kind == Kind::wait) {
        eligible = is_resolved(fences().outcome(command.awaited));
        at = std::max(at, resolved_at_[command.awaited.slot]);
      } else {
        at += command.duration;
      }
      if (eligible && (!found || at < best_due || (at == best_due && command.seq < best_seq))) {
        found = true;
        best_due = at;
        best_seq = command.seq;
        *which = const_cast<Queue*>(&q);
        *position = p;
      }
      all_done = false;
      if (in_order || command.kind == Kind::wait) break;  // nothing after it can start yet
    }
  }
  *due = best_due;
  return found;
}

void HostBackend::resolve_at(Fence fence, FenceOutcome outcome, std::uint64_t time) {
  if (!fence.recorded()) return;
  resolved_at_[fence.slot] = time;
  fences().resolve(fence, outcome);
}

std::uint32_t HostBackend::run_until(std::uint64_t time) {
  std::uint32_t resolved = 0;
  for (;;) {
    std::uint64_t due;
    Queue* q = nullptr;
    std::uint64_t position;
    if (!next_event(&due, &q, &position) || due > time) break;
    now_ = std::max(now_, due);
    Command& command = q->ring[position % q->ring.size()];
    const FenceOutcome worst_before = q->worst;
    FenceOutcome outcome = execute(*q, command, false);
    if (command.kind == Kind::marker) outcome = worse_outcome(outcome, worst_before);
    if (command.kind == Kind::wait) {
      propagate(*q, position, outcome);
      outcome = FenceOutcome::signalled;
    }
    command.done = true;
    command.done_at = now_;
    command.outcome = outcome;
    if (command.fence.recorded()) {
      resolve_at(command.fence, outcome, now_);
      ++resolved;
    }
    retire(*q);
  }
  now_ = std::max(now_, time);
  return resolved;
}

std::uint32_t HostBackend::poll() {
  if (!options_.deterministic) return 0;
  std::lock_guard lock(mutex_);
  return run_until(now_);
}

std::uint32_t HostBackend::advance(std::uint64_t ticks) {
  AK_ASSERT(options_.deterministic, "advance() is for the deterministic mode");
  std::lock_guard lock(mutex_);
  return run_until(now_ + ticks);
}

}  // namespace activekv::host
