// retained_test.cpp — immutable pages kept in headroom, split into host and device runs.
#include "activekv/retained.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

// P = 4 tokens, 8-byte rows → 32-byte pages; 2 slots × 2 layers × 8 pages per layer.
constexpr std::uint64_t row_bytes = 8;
constexpr std::uint32_t P = 4;

RetainedConfig small_config(std::uint64_t cap = 0) { return RetainedConfig{2, 2, P, 8, cap}; }

TEST(Retained, CapturesOnlyFullPagesBelowTheTail) {
  Headroom h = Headroom::create(1000, 16 * P * row_bytes, P * row_bytes).value();
  RetainedHistory r = RetainedHistory::create(small_config(), h).value();
  // A context of 10 tokens: pages 0 and 1 are full; page 2 (tokens 8, 9) is the tail.
  EXPECT_EQ(r.capture(0, 0, 2, 10), UINT64_MAX);
  EXPECT_EQ(r.capture(0, 0, 1, 10), 1000u);       // headroom page 0
  EXPECT_EQ(r.capture(0, 0, 1, 10), 1000u);       // already retained: same page, not counted twice
  EXPECT_EQ(r.capture(0, 1, 0, 10), 1000u + 32u); // headroom page 1
  EXPECT_EQ(r.pages_held(0), 2u);
  EXPECT_EQ(r.counters().pages_captured, 2u);
  EXPECT_TRUE(r.retained(0, 0, 1));
  EXPECT_FALSE(r.retained(0, 0, 0));
  r.validate();
}

TEST(Retained, SplitCutsHostAndRetainedRunsWorkedByHand) {
  Headroom h = Headroom::create(0, 16 * P * row_bytes, P * row_bytes).value();
  RetainedHistory r = RetainedHistory::create(small_config(), h).value();
  // Retain logical pages 1, 2 (headroom 0, 1: adjacent) and 5 (headroom 2) of a 32-token context.
  ASSERT_EQ(r.capture(1, 0, 1, 32), 0u);
  ASSERT_EQ(r.capture(1, 0, 2, 32), 32u);
  ASSERT_EQ(r.capture(1, 0, 5, 32), 64u);
  // Stage tokens [4, 28) = logical pages 1..6:
  //   [4, 12)  retained, one d2d from headroom offset 0 (pages 1, 2 adjacent in headroom)
  //   [12, 20) host (pages 3, 4), one h2d
  //   [20, 24) retained (page 5), one d2d from offset 64
  //   [24, 28) host (page 6)
  std::vector<StagedRun> runs(8);
  const SplitCounts c = r.split(1, 0, 4, 28, runs);
  ASSERT_EQ(c.runs, 4u);
  EXPECT_EQ(c.host_runs, 2u);
  EXPECT_EQ(c.retained_runs, 2u);
  EXPECT_EQ(c.host_tokens, 12u);
  EXPECT_EQ(c.retained_tokens, 12u);
  EXPECT_EQ(runs[0].token_begin, 4u);
  EXPECT_EQ(runs[0].token_end, 12u);
  EXPECT_TRUE(runs[0].retained);
  EXPECT_EQ(runs[0].device_offset_bytes, 0u);
  EXPECT_EQ(runs[1].token_begin, 12u);
  EXPECT_FALSE(runs[1].retained);
  EXPECT_EQ(runs[2].device_offset_bytes, 64u);
  EXPECT_EQ(runs[3].token_end, 28u);
  EXPECT_EQ(r.counters().pages_materialised, 3u);

  // A range starting mid-page: [6, 10) is the second half of page 1 and first half of page 2,
  // one retained run from offset 0 + 2 tokens × 8 bytes = 16.
  const SplitCounts mid = r.split(1, 0, 6, 10, runs);
  ASSERT_EQ(mid.runs, 1u);
  EXPECT_EQ(runs[0].device_offset_bytes, 16u);
  // Too small an output span still counts every run it needed.
  const SplitCounts small = r.split(1, 0, 4, 28, std::span<StagedRun>(runs.data(), 1));
  EXPECT_EQ(small.runs, 1u);
  EXPECT_EQ(small.runs_needed, 4u);
}

TEST(Retained, PerContextCapAndRelease) {
  Headroom h = Headroom::create(0, 16 * P * row_bytes, P * row_bytes).value();
  RetainedHistory r = RetainedHistory::create(small_config(/*cap=*/2), h).value();
  EXPECT_NE(r.capture(0, 0, 0, 32), UINT64_MAX);
  EXPECT_NE(r.capture(0, 0, 1, 32), UINT64_MAX);
  EXPECT_EQ(r.capture(0, 0, 2, 32), UINT64_MAX);  // at its cap
  EXPECT_EQ(r.counters().capture_refusals, 1u);
  EXPECT_NE(r.capture(1, 1, 0, 32), UINT64_MAX);  // another context is not limited by it
  r.release_context(0);
  EXPECT_EQ(r.pages_held(0), 0u);
  EXPECT_EQ(h.pages_lent(), 1u);
  EXPECT_EQ(r.counters().pages_released, 2u);
  r.validate();
}

TEST(Retained, TakingHeadroomBackDropsEntriesAndTheyStageFromTheHostAgain) {
  // 4 headroom pages, all lent; pressure takes 3: the entries in headroom pages 1..3 drop.
  Headroom h = Headroom::create(0, 4 * P * row_bytes, P * row_bytes).value();
  RetainedHistory r = RetainedHistory::create(small_config(), h).value();
  for (std::uint32_t logical = 0; logical < 4; ++logical) ASSERT_NE(r.capture(0, 0, logical, 32), UINT64_MAX);
  EXPECT_EQ(r.take_back_headroom(3), 3u);
  EXPECT_EQ(r.pages_held(0), 1u);
  EXPECT_EQ(r.counters().pages_dropped, 3u);
  EXPECT_EQ(h.counters().takings, 1u);
  EXPECT_EQ(h.counters().pages_revoked, 3u);
  std::vector<StagedRun> runs(4);
  const SplitCounts c = r.split(0, 0, 0, 16, runs);
  EXPECT_EQ(c.retained_tokens, 4u);   // page 0 still retained
  EXPECT_EQ(c.host_tokens, 12u);      // pages 1..3 stage from the host again
  EXPECT_EQ(r.capture(0, 0, 1, 32), UINT64_MAX);  // nothing lendable while taken
  r.restore_headroom(3);
  EXPECT_NE(r.capture(0, 0, 1, 32), UINT64_MAX);
  r.validate();
}

TEST(Retained, RefusesZeroFieldsByName) {
  Headroom h = Headroom::create(0, 0, 32).value();
  EXPECT_EQ(RetainedHistory::create(RetainedConfig{0, 2, P, 8, 0}, h).error().setting, "--max-seqs");
  EXPECT_EQ(RetainedHistory::create(RetainedConfig{2, 0, P, 8, 0}, h).error().setting, "--dense-layers");
  EXPECT_EQ(RetainedHistory::create(RetainedConfig{2, 2, 0, 8, 0}, h).error().setting, "--page-tokens");
}

// Random capture / split / release / take back / restore: tables and headroom stay consistent,
// every split covers its range exactly in order, and nothing allocates after create().
TEST(Retained, PropertyRandomOperationsKeepTheTablesConsistent) {
  std::vector<StagedRun> runs(64);
  for (std::uint32_t seed = 0; seed < 200; ++seed) {
    std::mt19937 rng_engine(seed);
    auto rng = [&rng_engine] { return static_cast<std::uint32_t>(rng_engine()); };
    const std::uint32_t headroom_pages = rng() % 40;
    Headroom h = Headroom::create(0, headroom_pages * P * row_bytes, P * row_bytes).value();
    RetainedHistory r = RetainedHistory::create(RetainedConfig{3, 2, P, 16, rng() % 10}, h).value();
    const auto before = testing::heap_allocations();
    for (int op = 0; op < 300; ++op) {
      const std::uint32_t slot = rng() % 3, layer = rng() % 2;
      switch (rng() % 6) {
        case 0:
        case 1: r.capture(slot, layer, rng() % 16, rng() % 65); break;
        case 2: {
          const std::uint32_t begin = rng() % 64;
          const std::uint32_t end = begin + rng() % (65 - begin);
          const SplitCounts c = r.split(slot, layer, begin, end, runs);
          ASSERT_EQ(c.host_tokens + c.retained_tokens, end - begin);
          std::uint32_t at = begin;
          for (std::uint32_t i = 0; i < c.runs; ++i) {
            ASSERT_EQ(runs[i].token_begin, at);
            ASSERT_LT(runs[i].token_begin, runs[i].token_end);
            at = runs[i].token_end;
          }
          if (c.runs == c.runs_needed) {
            ASSERT_EQ(at, end);
          }
          break;
        }
        case 3: r.release_context(slot); break;
        case 4: r.take_back_headroom(rng() % 5); break;
        case 5: r.restore_headroom(rng() % 5); break;
      }
      ASSERT_EQ(r.check(), nullptr) << "seed " << seed << " op " << op;
    }
    EXPECT_EQ(testing::heap_allocations(), before) << "seed " << seed;
  }
}

}  // namespace
}  // namespace activekv
