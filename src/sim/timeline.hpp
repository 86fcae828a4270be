// timeline.hpp — the simulated device: in-order queues, fences with signal times, tile leases.
//
// A device queue runs its commands in the order they were issued; a command
// starts when its queue is free and every fence it waits on has signalled, and
// it signals its own fence when its cost-model time has passed. That is all a
// discrete-event simulation of in-order queues needs: an event is a fence
// signalling, and because each queue is FIFO the next event on a queue is
// always the command at its head. So a queue is its "free at" time, and
// submit() advances it — no event heap, no allocation.
//
// Staging tiles are leases, as on a real backend (DESIGN.md "Fences, leases,
// quarantine"): a tile slot is acquired, filled by copies, read by attention,
// and released only on the fence of the last command that touched it. The
// next holder of the slot cannot start copying before that fence signals — so
// the number of tiles bounds how far copies may run ahead of attention. A
// lease carries the slot's generation; releasing a stale lease is a
// programming error and aborts.
//
// Invariant: every queue's time only moves forward; a lease is released at
// most once; all leases are back when a step ends (checked by tiles_held()).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/cost_model.hpp"

namespace activekv::sim {

enum class QueueKind : std::uint8_t { compute, h2d, d2h, d2d };
inline constexpr std::uint32_t queue_kinds = 4;
const char* queue_kind_name(QueueKind kind) noexcept;

// When a command's effects are visible: the simulated time its fence signals.
struct SimFence {
  double signal_seconds = 0.0;
};

struct TileLease {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
  double ready_seconds = 0.0;  // when the slot's previous holder released it
};

struct QueueStats {
  double busy_seconds = 0.0;  // sum of command durations
  std::uint64_t commands = 0;
};

class Timeline {
 public:
  // Allocates the queue and tile tables once; nothing after.
  Timeline(const CostModel& cost, std::uint32_t tile_slots);

  // A command of `duration_seconds` on a queue of `kind`, not before `ready_seconds`.
  // With several queues of one kind the command takes the one free first.
  // A d2d command goes to the compute queue when the model has no d2d queue.
  SimFence submit(QueueKind kind, double ready_seconds, double duration_seconds);

  TileLease acquire_tile();
  void release_tile(const TileLease& lease, SimFence last_use);
  std::uint32_t tiles_held() const noexcept { return tiles_held_; }
  std::uint32_t tile_slots() const noexcept { return static_cast<std::uint32_t>(tiles_.size()); }

  // When the last command issued so far on any queue of `kind` signals.
  double free_seconds(QueueKind kind) const noexcept;
  const QueueStats& stats(QueueKind kind) const noexcept { return stats_[static_cast<std::uint32_t>(kind)]; }
  const CostModel& cost() const noexcept { return cost_; }

 private:
  struct Slot {
    double free_seconds = 0.0;
    std::uint32_t generation = 0;
    bool held = false;
  };
  std::uint32_t queue_base(QueueKind kind) const noexcept;
  std::uint32_t queue_count(QueueKind kind) const noexcept;

  CostModel cost_;
  std::vector<double> queue_free_seconds_;  // [compute | h2d × n | d2h × n | d2d × n], sized at construction
  QueueStats stats_[queue_kinds];
  std::vector<Slot> tiles_;                 // sized at construction
  std::uint32_t next_tile_ = 0;             // slots are handed out round-robin
  std::uint32_t tiles_held_ = 0;
};

}  // namespace activekv::sim
