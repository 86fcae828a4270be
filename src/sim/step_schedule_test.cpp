// step_schedule_test.cpp — a step's timing on the simulated device, worked by hand.
//
// Every case uses round rates so the timeline can be drawn on paper; the
// drawing is in the comment above each expectation.
#include "sim/step_schedule.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "testing/alloc_counter.hpp"

namespace activekv::sim {
namespace {

// 1 byte per row, 1,000-token tiles; h2d 1 GB/s (1 µs per 1,000 B); attention 2 ns/B
// (2 µs per 1,000 B); d2d 4 GB/s; no latencies, no launch, no non-attention work.
CostModel paper_model() {
  CostModel cost;
  cost.h2d_bytes_per_second = 1e9;
  cost.d2h_bytes_per_second = 1e9;
  cost.d2d_bytes_per_second = 4e9;
  cost.copy_latency_seconds = 0;
  cost.attention_seconds_per_byte = 2e-9;
  cost.attention_launch_seconds = 0;
  cost.non_attention_seconds_per_step = 0;
  cost.non_attention_seconds_per_token = 0;
  return cost;
}

LayerWork staged_h2d(std::uint64_t tokens) {
  LayerWork w;
  w.staged_tokens = tokens;
  w.h2d_bytes = tokens;
  w.h2d_copies = 1;
  return w;
}

constexpr double us = 1e-6;

TEST(StepSchedule, ResidentOnlyIsAttentionTime) {
  Timeline timeline(paper_model(), 1);
  // 2 contexts × 2 layers, 500 resident bytes each: 4 × 500 B × 2 ns = 4 µs, no copies.
  std::vector<LayerWork> work(4);
  for (LayerWork& w : work) w.resident_bytes = 500;
  const StepTiming t = schedule_step(timeline, StepShape{2, 2, 1000, 1}, work, 0.0);
  EXPECT_NEAR(t.seconds(), 4 * us, 1e-12);
  EXPECT_DOUBLE_EQ(t.h2d_busy_seconds, 0.0);
  EXPECT_DOUBLE_EQ(t.stall_seconds, 0.0);
}

TEST(StepSchedule, OneTileSerialisesCopyAndAttention) {
  // One tile slot, two contexts each staging 1,000 tokens in one layer:
  //   A: h2d 0→1 µs, attention 1→3 µs, tile released at 3
  //   B: waits for the tile: h2d 3→4 µs, attention 4→6 µs
  // step = 6 µs; compute stalls 1 µs before A and 1 µs before B.
  Timeline timeline(paper_model(), 1);
  std::vector<LayerWork> work{staged_h2d(1000), staged_h2d(1000)};
  const StepTiming t = schedule_step(timeline, StepShape{2, 1, 1000, 1}, work, 0.0);
  EXPECT_NEAR(t.seconds(), 6 * us, 1e-12);
  EXPECT_NEAR(t.stall_seconds, 2 * us, 1e-12);
  EXPECT_NEAR(t.h2d_busy_seconds, 2 * us, 1e-12);
  EXPECT_EQ(t.tiles_used, 2u);
}

TEST(StepSchedule, TwoTilesLetTheCopyRunAhead) {
  // Two tile slots: A: h2d 0→1, attention 1→3; B: h2d 1→2 (own tile), attention 3→5.
  // step = 5 µs; only A's first microsecond stalls.
  Timeline timeline(paper_model(), 2);
  std::vector<LayerWork> work{staged_h2d(1000), staged_h2d(1000)};
  const StepTiming t = schedule_step(timeline, StepShape{2, 1, 1000, 1}, work, 0.0);
  EXPECT_NEAR(t.seconds(), 5 * us, 1e-12);
  EXPECT_NEAR(t.stall_seconds, 1 * us, 1e-12);
}

TEST(StepSchedule, ResidentAttentionHidesTheCopy) {
  // Context A has 1,000 resident bytes (2 µs of attention), B stages 1,000 tokens.
  // The engine issues resident attention first: compute 0→2 µs while h2d runs 0→1 µs,
  // then B's tile attention 2→4 µs. step = 4 µs, no stall.
  Timeline timeline(paper_model(), 1);
  LayerWork a;
  a.resident_bytes = 1000;
  std::vector<LayerWork> work{a, staged_h2d(1000)};
  const StepTiming t = schedule_step(timeline, StepShape{2, 1, 1000, 1}, work, 0.0);
  EXPECT_NEAR(t.seconds(), 4 * us, 1e-12);
  EXPECT_DOUBLE_EQ(t.stall_seconds, 0.0);
}

TEST(StepSchedule, RetainedPagesMaterialiseBesideTheIncomingSuffix) {
  // One context stages 2,000 tokens: 1,000 over h2d (1 µs) and 1,000 retained, by d2d
  // on the compute queue (1,000 B / 4 GB/s = 0.25 µs). Tiles of 2,000 tokens.
  //   h2d 0→1 µs on the copy engine; d2d 0→0.25 µs on compute; both done at 1 µs;
  //   attention over 2,000 B: 1→5 µs. step = 5 µs.
  // Without retention (all 2,000 over h2d): h2d 0→2 µs, attention 2→6 µs. step = 6 µs.
  Timeline timeline(paper_model(), 1);
  LayerWork w;
  w.staged_tokens = 2000;
  w.h2d_bytes = 1000;
  w.h2d_copies = 1;
  w.d2d_bytes = 1000;
  w.d2d_copies = 1;
  std::vector<LayerWork> work{w};
  EXPECT_NEAR(schedule_step(timeline, StepShape{1, 1, 2000, 1}, work, 0.0).seconds(), 5 * us, 1e-12);

  Timeline plain(paper_model(), 1);
  std::vector<LayerWork> all_h2d{staged_h2d(2000)};
  EXPECT_NEAR(schedule_step(plain, StepShape{1, 1, 2000, 1}, all_h2d, 0.0).seconds(), 6 * us, 1e-12);
}

TEST(StepSchedule, NonAttentionWorkIsSharedAcrossDenseLayers) {
  // non-attention: 8 µs per step + 1 µs per token; 2 tokens → 10 µs, 5 µs before each of 2 layers.
  // Each layer then attends over 2 × 500 resident bytes = 2 µs. step = 2 × (5 + 2) = 14 µs.
  CostModel cost = paper_model();
  cost.non_attention_seconds_per_step = 8 * us;
  cost.non_attention_seconds_per_token = 1 * us;
  Timeline timeline(cost, 1);
  std::vector<LayerWork> work(4);
  for (LayerWork& w : work) w.resident_bytes = 500;
  EXPECT_NEAR(schedule_step(timeline, StepShape{2, 2, 1000, 1}, work, 0.0).seconds(), 14 * us, 1e-12);
}

TEST(StepSchedule, TilesSpanningTwoSlotsSplitEvenly) {
  // 2,000 staged tokens through 1,000-token tiles, one slot, 2 copies:
  //   tile 0: h2d 0→1, attention 1→3; tile 1: h2d 3→4, attention 4→6. step = 6 µs.
  Timeline timeline(paper_model(), 1);
  LayerWork w = staged_h2d(2000);
  w.h2d_copies = 2;
  std::vector<LayerWork> work{w};
  const StepTiming t = schedule_step(timeline, StepShape{1, 1, 1000, 1}, work, 0.0);
  EXPECT_NEAR(t.seconds(), 6 * us, 1e-12);
  EXPECT_EQ(t.tiles_used, 2u);
}

TEST(StepSchedule, StepsAllocateNothing) {
  Timeline timeline(paper_model(), 2);
  std::vector<LayerWork> work(64, staged_h2d(1000));
  double now = 0.0;
  now = schedule_step(timeline, StepShape{8, 8, 1000, 1}, work, now).end_seconds;
  const auto before = testing::heap_allocations();
  for (int step = 0; step < 100; ++step) now = schedule_step(timeline, StepShape{8, 8, 1000, 1}, work, now).end_seconds;
  EXPECT_EQ(testing::heap_allocations(), before);
  EXPECT_GT(now, 0.0);
}

TEST(TimelineDeath, StaleLeaseIsRefused) {
  Timeline timeline(paper_model(), 1);
  const TileLease lease = timeline.acquire_tile();
  timeline.release_tile(lease, SimFence{1.0});
  EXPECT_DEATH(timeline.release_tile(lease, SimFence{2.0}), "released twice");
}

}  // namespace
}  // namespace activekv::sim
