// step_schedule.cpp — a step's commands, in engine order, onto the Timeline.
#include "sim/step_schedule.hpp"

#include <algorithm>

namespace activekv::sim {

namespace {

// The k-th of `parts` even shares of `total` (the first total % parts get one more).
std::uint64_t share(std::uint64_t total, std::uint64_t parts, std::uint64_t k) {
  return total / parts + (k < total % parts ? 1 : 0);
}

// A tile's share of a layer's copy commands: bytes are spread evenly over its tiles
// (an approximation documented in docs/SIMULATION.md), and a tile that receives
// bytes receives at least one command.
std::uint32_t copies_for(std::uint64_t bytes, std::uint32_t copies, std::uint64_t tiles, std::uint64_t k) {
  if (bytes == 0) return 0;
  AK_ASSERT(copies > 0, "bytes to copy without a copy command");
  return static_cast<std::uint32_t>(std::max<std::uint64_t>(1, share(copies, tiles, k)));
}

struct Busy {
  double compute, h2d, d2d, d2h;
};

Busy busy_now(const Timeline& timeline) {
  return {timeline.stats(QueueKind::compute).busy_seconds, timeline.stats(QueueKind::h2d).busy_seconds,
          timeline.stats(QueueKind::d2d).busy_seconds, timeline.stats(QueueKind::d2h).busy_seconds};
}

}  // namespace

StepTiming schedule_step(Timeline& timeline, const StepShape& shape, std::span<const LayerWork> work,
                         double start_seconds) {
  AK_ASSERT(shape.dense_layers > 0, "a step needs at least one dense layer");
  AK_ASSERT(shape.tile_tokens > 0, "tile tokens must be positive");
  AK_ASSERT(work.size() == static_cast<std::size_t>(shape.contexts) * shape.dense_layers,
            "work table must hold one entry per context and dense layer");
  AK_ASSERT(timeline.tiles_held() == 0, "a step begins with every tile lease returned");
  const CostModel& cost = timeline.cost();
  const Busy before = busy_now(timeline);
  StepTiming timing;
  timing.start_seconds = start_seconds;
  const std::uint32_t tokens = shape.tokens != 0 ? shape.tokens : shape.contexts;
  const double non_attention_share = cost.non_attention_seconds(tokens) / shape.dense_layers;
  double compute_end = std::max(start_seconds, timeline.free_seconds(QueueKind::compute));

  for (std::uint32_t layer = 0; layer < shape.dense_layers; ++layer) {
    const LayerWork* row = work.data() + static_cast<std::size_t>(layer) * shape.contexts;
    compute_end = timeline.submit(QueueKind::compute, start_seconds, non_attention_share).signal_seconds;
    for (std::uint32_t c = 0; c < shape.contexts; ++c) {
      compute_end = timeline.submit(QueueKind::compute, start_seconds, cost.attention_seconds(row[c].resident_bytes))
                        .signal_seconds;
    }
    for (std::uint32_t c = 0; c < shape.contexts; ++c) {
      const LayerWork& w = row[c];
      if (w.staged_tokens == 0) {
        AK_ASSERT(w.h2d_bytes == 0 && w.d2d_bytes == 0, "bytes staged without staged tokens");
        continue;
      }
      AK_ASSERT(w.h2d_bytes + w.d2d_bytes == w.staged_tokens * shape.row_bytes,
                "staged bytes must equal staged tokens × row bytes (h2d + d2d)");
      const std::uint64_t tiles = (w.staged_tokens + shape.tile_tokens - 1) / shape.tile_tokens;
      for (std::uint64_t k = 0; k < tiles; ++k) {
        const TileLease lease = timeline.acquire_tile();
        const std::uint64_t h2d_bytes = share(w.h2d_bytes, tiles, k);
        const std::uint64_t d2d_bytes = share(w.d2d_bytes, tiles, k);
        const std::uint32_t h2d_copies = copies_for(h2d_bytes, w.h2d_copies, tiles, k);
        const std::uint32_t d2d_copies = copies_for(d2d_bytes, w.d2d_copies, tiles, k);
        // A part with no copies issues nothing: an empty command on an in-order queue would still
        // hold that queue until the tile is free.
        const SimFence h2d = h2d_copies == 0 ? SimFence{lease.ready_seconds}
                                          : timeline.submit(QueueKind::h2d, lease.ready_seconds,
                                                            cost.h2d_seconds(h2d_bytes, h2d_copies));
        const SimFence d2d = d2d_copies == 0 ? SimFence{lease.ready_seconds}
                                          : timeline.submit(QueueKind::d2d, lease.ready_seconds,
                                                            cost.d2d_seconds(d2d_bytes, d2d_copies));
        const double copies_done = std::max(h2d.signal_seconds, d2d.signal_seconds);
        const double compute_free = timeline.free_seconds(QueueKind::compute);
        if (copies_done > compute_free) timing.stall_seconds += copies_done - compute_free;
        const SimFence attention =
            timeline.submit(QueueKind::compute, copies_done,
                            static_cast<double>(h2d_bytes + d2d_bytes) * cost.attention_seconds_per_byte);
        compute_end = attention.signal_seconds;
        SimFence last_use = attention;
        const std::uint64_t capture_bytes = share(w.capture_bytes, tiles, k);
        const std::uint32_t capture_copies = copies_for(capture_bytes, w.capture_copies, tiles, k);
        if (capture_copies > 0) {
          const SimFence capture =
              timeline.submit(QueueKind::d2d, h2d.signal_seconds, cost.d2d_seconds(capture_bytes, capture_copies));
          last_use.signal_seconds = std::max(last_use.signal_seconds, capture.signal_seconds);
        }
        timeline.release_tile(lease, last_use);
        ++timing.tiles_used;
      }
    }
    for (std::uint32_t c = 0; c < shape.contexts; ++c) {
      if (row[c].writeback_copies == 0) continue;
      timeline.submit(QueueKind::d2h, compute_end, cost.d2h_seconds(row[c].writeback_bytes, row[c].writeback_copies));
    }
  }
  compute_end = std::max(compute_end, timeline.free_seconds(QueueKind::compute));
  AK_ASSERT(timeline.tiles_held() == 0, "every tile lease is returned by the end of a step");
  const Busy after = busy_now(timeline);
  timing.end_seconds = compute_end;
  timing.compute_busy_seconds = after.compute - before.compute;
  timing.h2d_busy_seconds = after.h2d - before.h2d;
  timing.d2d_busy_seconds = after.d2d - before.d2d;
  timing.d2h_busy_seconds = after.d2h - before.d2h;
  return timing;
}

}  // namespace activekv::sim
