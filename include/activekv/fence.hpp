// fence.hpp — queues, fences and their outcomes: the vocabulary of ordering.
//
// A backend runs work on queues (compute, host-to-device, device-to-host and,
// where the device has one, device-to-device). Every piece of enqueued work is
// covered by a fence; a fence ends in exactly one outcome and never changes it:
//
//   pending ──▶ signalled     the work completed and its effects are visible
//           ├─▶ failed        the work reported an error (its effects are undefined)
//           └─▶ unknown       the backend cannot say (device lost, an error it
//                             could not attribute to one fence)
//
// Rules every backend keeps (DESIGN.md "Fences, leases, quarantine"):
//   - A Fence handle carries the generation of its slot. A handle whose
//     generation is 0 was never recorded: it is not complete, and querying it
//     answers `unknown`, never `signalled`.
//   - A stale handle (its slot was recycled) is detected and answers `unknown`;
//     a lease that depends on it is quarantined rather than trusted.
//   - A backend error not attributable to one fence turns every pending fence
//     into `unknown`.
//   - Only `signalled` lets a buffer be reused; `failed` and `unknown` quarantine
//     every buffer the fence touched (see lease.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace activekv {

enum class QueueKind : std::uint8_t {
  compute,  // the attention kernel (and device-to-device copies where no own engine)
  h2d,      // host pool -> arena: staging tiles, new rows
  d2h,      // arena -> host pool: tail write-back
  d2d,      // arena -> arena: promotions (may alias compute; see Capabilities)
};
inline constexpr std::size_t queue_kind_count = 4;

const char* queue_kind_name(QueueKind queue) noexcept;

enum class FenceOutcome : std::uint8_t { pending, signalled, failed, unknown };

const char* fence_outcome_name(FenceOutcome outcome) noexcept;

constexpr bool is_resolved(FenceOutcome outcome) noexcept { return outcome != FenceOutcome::pending; }

// Worse outcomes win when outcomes combine: unknown > failed > pending > signalled.
constexpr int fence_outcome_severity(FenceOutcome outcome) noexcept {
  switch (outcome) {
    case FenceOutcome::signalled: return 0;
    case FenceOutcome::pending: return 1;
    case FenceOutcome::failed: return 2;
    case FenceOutcome::unknown: return 3;
  }
  return 3;
}
constexpr FenceOutcome worse_outcome(FenceOutcome a, FenceOutcome b) noexcept {
  return fence_outcome_severity(a) >= fence_outcome_severity(b) ? a : b;
}

// A handle into a backend's fence table. Plain data: copying it does not keep
// the slot alive; Backend::retain_fence / release_fence do (as clRetainEvent).
struct Fence {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;  // 0: never recorded

  constexpr bool recorded() const noexcept { return generation != 0; }
  friend constexpr bool operator==(Fence, Fence) = default;
};

}  // namespace activekv
