// host_backend_faults.cpp — what the deterministic host backend draws from its
// seed for each command (a duration in ticks, and the injected faults: a late,
// failed or unknown fence, a failed copy) and what losing the device does to
// the commands in flight (copies already started are torn; every fence left
// turns unknown). Invariant: the draws depend only on the seed and the order
// of commands, so a seed replays the same faults.
#include "backends/fence_table.hpp"
#include "backends/host/host_backend.hpp"

namespace activekv::host {

namespace {

constexpr std::uint64_t duration_ticks_max = 100;  // deterministic: 1..100 ticks per command

double unit_interval(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

void HostBackend::fail_next_copy(CopyDirection direction) {
  std::lock_guard lock(mutex_);
  AK_ASSERT(options_.deterministic, "fail_next_copy() needs the deterministic host backend");
  fail_next_copy_[static_cast<std::size_t>(direction)] = true;
}

void HostBackend::draw(Command& command, bool is_copy) {
  if (!options_.deterministic) return;
  const FaultRates& rates = options_.faults;
  command.duration = 1 + rng_() % duration_ticks_max;
  const double late = unit_interval(rng_);
  const double kind = unit_interval(rng_);
  command.effect_on_unknown = (rng_() & 1) != 0;
  command.torn_fraction = rng_() % 1000;
  if (command.kind == Kind::wait) return;
  if (late < rates.late_fence) {
    command.duration += rates.late_ticks;
    ++faults_.late;
  }
  if (command.kind == Kind::marker) return;
  double edge = is_copy ? rates.failed_copy : 0.0;
  if (kind < edge) {
    command.fault = Fault::failed_copy;
    ++faults_.failed_copies;
    return;
  }
  edge += rates.failed_fence;
  if (kind < edge) {
    command.fault = Fault::failed_fence;
    ++faults_.failed_fences;
    return;
  }
  edge += rates.unknown_fence;
  if (kind < edge) {
    command.fault = Fault::unknown_fence;
    ++faults_.unknown_fences;
  }
}

void HostBackend::lose_device() {
  std::lock_guard lock(mutex_);
  if (options_.deterministic) {
    for (Queue& q : queues_) {
      for (std::uint64_t p = q.head; p < q.tail; ++p) {
        Command& command = q.ring[p % q.ring.size()];
        std::uint64_t due;
        if (command.done || command.kind == Kind::wait || command.kind == Kind::marker || command.kind == Kind::attention) continue;
        if (!eligible_at(q, p, &due) || due - command.duration > now_) continue;  // not started yet
        apply_copy(q, command, rng_() % 1000);
        ++faults_.torn_copies;
      }
    }
    for (Queue& q : queues_) {
      for (std::uint64_t p = q.head; p < q.tail; ++p) {
        Command& command = q.ring[p % q.ring.size()];
        if (command.done) continue;
        if (command.fence.recorded()) resolved_at_[command.fence.slot] = now_;
        command.done = true;
        command.done_at = now_;
        command.outcome = FenceOutcome::unknown;
      }
    }
  }
  mark_lost();
  if (options_.deterministic) {
    for (Queue& q : queues_) retire(q);
  }
}

}  // namespace activekv::host
