// timeline.cpp — FIFO queues advanced by cost-model durations; tile leases released on fences.
#include "sim/timeline.hpp"

#include <algorithm>

namespace activekv::sim {

const char* queue_kind_name(QueueKind kind) noexcept {
  switch (kind) {
    case QueueKind::compute: return "compute";
    case QueueKind::h2d: return "h2d";
    case QueueKind::d2h: return "d2h";
    case QueueKind::d2d: return "d2d";
  }
  return "?";
}

Timeline::Timeline(const CostModel& cost, std::uint32_t tile_slots) : cost_(cost) {
  AK_ASSERT(cost.validate().ok(), "Timeline needs a valid cost model");
  AK_ASSERT(tile_slots > 0, "Timeline needs at least one tile slot");
  queue_free_seconds_.assign(1u + cost.h2d_queues + cost.d2h_queues + cost.d2d_queues, 0.0);
  tiles_.assign(tile_slots, Slot{});
}

std::uint32_t Timeline::queue_base(QueueKind kind) const noexcept {
  switch (kind) {
    case QueueKind::compute: return 0;
    case QueueKind::h2d: return 1;
    case QueueKind::d2h: return 1 + cost_.h2d_queues;
    case QueueKind::d2d: return cost_.d2d_queues == 0 ? 0 : 1 + cost_.h2d_queues + cost_.d2h_queues;
  }
  return 0;
}

std::uint32_t Timeline::queue_count(QueueKind kind) const noexcept {
  switch (kind) {
    case QueueKind::compute: return 1;
    case QueueKind::h2d: return cost_.h2d_queues;
    case QueueKind::d2h: return cost_.d2h_queues;
    case QueueKind::d2d: return cost_.d2d_queues == 0 ? 1 : cost_.d2d_queues;
  }
  return 1;
}

SimFence Timeline::submit(QueueKind kind, double ready_seconds, double duration_seconds) {
  AK_ASSERT(duration_seconds >= 0.0, "a command cannot take negative time");
  AK_ASSERT(ready_seconds >= 0.0, "a command cannot be ready before time zero");
  const std::uint32_t base = queue_base(kind);
  const std::uint32_t count = queue_count(kind);
  std::uint32_t chosen = base;
  for (std::uint32_t q = base + 1; q < base + count; ++q) {
    if (queue_free_seconds_[q] < queue_free_seconds_[chosen]) chosen = q;
  }
  const double start = std::max(queue_free_seconds_[chosen], ready_seconds);
  const double end = start + duration_seconds;
  queue_free_seconds_[chosen] = end;
  QueueStats& stats = stats_[static_cast<std::uint32_t>(kind)];
  stats.busy_seconds += duration_seconds;
  ++stats.commands;
  return SimFence{end};
}

TileLease Timeline::acquire_tile() {
  Slot& slot = tiles_[next_tile_];
  AK_ASSERT(!slot.held, "tile slot acquired while its previous lease is still held: release before reuse");
  slot.held = true;
  ++tiles_held_;
  TileLease lease{next_tile_, slot.generation, slot.free_seconds};
  next_tile_ = (next_tile_ + 1) % static_cast<std::uint32_t>(tiles_.size());
  return lease;
}

void Timeline::release_tile(const TileLease& lease, SimFence last_use) {
  AK_ASSERT(lease.slot < tiles_.size(), "tile lease names a slot that does not exist");
  Slot& slot = tiles_[lease.slot];
  AK_ASSERT(slot.held, "tile lease released twice");
  AK_ASSERT(slot.generation == lease.generation, "stale tile lease: its generation has moved on");
  AK_ASSERT(last_use.signal_seconds >= lease.ready_seconds, "a tile's last use cannot signal before the tile was free");
  slot.held = false;
  ++slot.generation;
  slot.free_seconds = last_use.signal_seconds;
  --tiles_held_;
}

double Timeline::free_seconds(QueueKind kind) const noexcept {
  const std::uint32_t base = queue_base(kind);
  double latest = 0.0;
  for (std::uint32_t q = base; q < base + queue_count(kind); ++q) latest = std::max(latest, queue_free_seconds_[q]);
  return latest;
}

}  // namespace activekv::sim
