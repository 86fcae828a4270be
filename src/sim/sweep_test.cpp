// sweep_test.cpp — the seed's figures out of the real core, and a reduced sweep end to end.
#include "sim/sweep.hpp"

#include <gtest/gtest.h>

#include <array>

#include "activekv/size.hpp"
#include "sim/core_instance.hpp"

namespace activekv::sim {
namespace {

TEST(Sweep, SeedFiguresComeOutOfTheRealCore) {
  const Scenario s = make_scenario("hybrid-27b").value();
  const MemoryPlan plan = make_memory_plan(memory_settings(s, Variant::activekv)).value();
  EXPECT_EQ(plan.host.segment_bytes, 128 * MiB);        // 32,768 tokens × 4,096-byte rows
  EXPECT_EQ(plan.host.history_bytes, 2 * GiB);          // 16 segments: 2 GiB per 32K history
  EXPECT_EQ(plan.host.histories, 32u);                  // a 64 GiB host pool holds 32
  // Recurrent state per context: Qwen3.5-27B's, 146.8 MiB, the seed's "147 MiB" (core/geometry.cpp).
  EXPECT_EQ(plan.arena.recurrent_slot_bytes, 153'944'064u);
  EXPECT_EQ((plan.arena.recurrent_slot_bytes + MiB / 2) / MiB, 147u);
  EXPECT_EQ(plan.geometry.dense_layers, 16u);           // 16 dense layers ...
  auto core = CoreInstance::create(s, Variant::activekv).value();
  EXPECT_EQ(core->arena().counters().device_allocations, 1u);  // ... sharing one arena
  const MemoryPlan with_headroom = make_memory_plan(memory_settings(s, Variant::activekv_headroom)).value();
  EXPECT_EQ(with_headroom.arena.headroom.size_bytes, 8 * GiB);
  EXPECT_EQ(with_headroom.arena.pages, plan.arena.pages);  // headroom adds to the arena, not to the pool
}

TEST(Sweep, StockCapacityAndStepWorkedByHand) {
  const Scenario s = make_scenario("hybrid-27b").value();
  // 32 GiB − 14 GiB weights − 1.5 GiB reserve = 16.5 GiB for KV.
  EXPECT_EQ(s.stock_kv_bytes(), 16 * GiB + GiB / 2);
  // 32K context: 2 GiB + 147 MiB = 2,301,624,320 B; 17,716,740,096 / that = 7.7 → 7.
  EXPECT_EQ(s.stock_capacity(32768), 7u);
  // 8K context: 512 MiB + 147 MiB = 659 MiB; 16,896 MiB / 659 MiB = 25.6 → 25.
  EXPECT_EQ(s.stock_capacity(8192), 25u);
  // One 32K context: non-attention 14 GiB / 486.4 GB/s = 30.905 ms, plus one token
  // 2 × 27e9 / (183e12 × 0.3) = 0.984 ms; attention 16 × (10 µs + 128 MiB / 486.4 GB/s)
  // = 16 × 0.28594 ms = 4.575 ms. Total 36.464 ms.
  EXPECT_NEAR(stock_step_seconds(s, 1, 32768), 0.036464, 2e-6);
}

TEST(Sweep, ReducedScenarioEndToEnd) {
  const Scenario full = make_scenario("hybrid-27b").value();
  const std::array<std::uint32_t, 2> lengths{2048, 16384};
  const std::array<std::uint32_t, 2> concurrency{1, 4};
  const Scenario s = reduced(full, lengths, concurrency, 2);
  SweepOptions options;
  options.probes = false;
  const SweepResult r = run_sweep(s, options).value();
  EXPECT_EQ(r.cells.size(), 3u * 2u * 2u);
  EXPECT_EQ(r.heap_allocations, 0u);  // invariant 7 on the step path: planning, translating, scheduling
  EXPECT_GT(r.measured_steps, 0u);

  // One context fits in the pool entirely: ActiveKV stages nothing and matches stock.
  const CellResult* stock_1 = r.find(Variant::stock, 1, 16384);
  const CellResult* akv_1 = r.find(Variant::activekv, 1, 16384);
  ASSERT_TRUE(stock_1 && akv_1 && stock_1->ran && akv_1->ran);
  EXPECT_EQ(akv_1->h2d_bytes_per_step, 0.0);
  EXPECT_NEAR(akv_1->itl_seconds, stock_1->itl_seconds, stock_1->itl_seconds * 0.01);

  // Four 16K contexts need 4 GiB; the pool holds about 3.16 GiB: the rest crosses PCIe
  // every step, and ActiveKV is slower than stock (which still fits 14 such contexts).
  const CellResult* stock_4 = r.find(Variant::stock, 4, 16384);
  const CellResult* akv_4 = r.find(Variant::activekv, 4, 16384);
  const CellResult* hr_4 = r.find(Variant::activekv_headroom, 4, 16384);
  ASSERT_TRUE(stock_4 && akv_4 && hr_4 && stock_4->ran && akv_4->ran && hr_4->ran);
  const double kv_bytes = 4.0 * 16384 * static_cast<double>(s.kv_bytes_per_token());
  const double pool_bytes = static_cast<double>(r.plan.arena.page_pool.size_bytes);
  EXPECT_NEAR(akv_4->h2d_bytes_per_step, kv_bytes - pool_bytes, 64.0 * static_cast<double>(r.plan.arena.page_bytes));
  EXPECT_GT(akv_4->itl_seconds, stock_4->itl_seconds * 1.5);
  // With headroom the same bytes come from retained history by d2d, not over the link.
  EXPECT_EQ(hr_4->h2d_bytes_per_step, 0.0);
  EXPECT_NEAR(hr_4->d2d_bytes_per_step, akv_4->h2d_bytes_per_step, 1.0);
  EXPECT_LT(hr_4->itl_seconds, akv_4->itl_seconds * 0.75);
  EXPECT_GT(hr_4->retained_pages, 0u);
}

TEST(Sweep, RefusesAnArenaThatDoesNotFitTheCard) {
  Scenario s = make_scenario("hybrid-27b").value();
  s.headroom_bytes = 12 * GiB;  // 14 + 1.5 + 8 + 12 > 32 GiB
  const auto r = run_sweep(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().setting, "--device-pool");
  EXPECT_FALSE(make_scenario("gpt-5").ok());
  EXPECT_EQ(make_scenario("gpt-5").error().setting, "--scenario");
}

}  // namespace
}  // namespace activekv::sim
