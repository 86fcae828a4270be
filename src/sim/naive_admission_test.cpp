// naive_admission_test.cpp — the naive policy's admissions and evictions, worked by hand,
// and its limit cycle on a homogeneous saturating workload.
#include "sim/naive_admission.hpp"

#include <gtest/gtest.h>

#include "testing/alloc_counter.hpp"

namespace activekv::sim {
namespace {

TEST(NaiveAdmission, FiveStepsWorkedByHand) {
  // 10 pages of one token each, no recurrent state, max 4 running, prompt 2, output 4.
  NaiveAdmission naive(NaiveSettings{10, 1, 0, 4, 2, 4});
  // Step 1: four requests fit (4 × 2 = 8 pages); all prefill, none decodes.
  NaiveStep s = naive.step();
  EXPECT_EQ(s.admitted, 4u);
  EXPECT_EQ(s.decoded_tokens, 0u);
  EXPECT_EQ(s.pages_used, 8u);
  EXPECT_EQ(s.prefill_tokens, 8u);
  // Step 2: r0, r1 take the 2 free pages; r2 finds none and evicts the newest, r3 (2 pages).
  s = naive.step();
  EXPECT_EQ(s.evicted, 1u);
  EXPECT_EQ(s.decoded_tokens, 3u);
  EXPECT_EQ(s.running, 3u);
  EXPECT_EQ(s.pages_used, 9u);
  // Step 3: r3 (2 pages) does not fit in 1 free page. r0 takes it; r1 evicts r2 (3 pages).
  s = naive.step();
  EXPECT_EQ(s.admitted, 0u);
  EXPECT_EQ(s.evicted, 1u);
  EXPECT_EQ(s.decoded_tokens, 2u);
  EXPECT_EQ(s.pages_used, 8u);
  // Step 4: r2 needs 3 pages, 2 free: waits. r0 and r1 each take one.
  s = naive.step();
  EXPECT_EQ(s.decoded_tokens, 2u);
  EXPECT_EQ(s.pages_used, 10u);
  // Step 5: r0 needs a page, none free: evicts r1 (5 pages), decodes its 4th token, finishes.
  s = naive.step();
  EXPECT_EQ(s.evicted, 1u);
  EXPECT_EQ(s.finished, 1u);
  EXPECT_EQ(s.running, 0u);
  EXPECT_EQ(s.pages_used, 0u);
  // Step 6: the evicted come back first, recomputing prompt + generated: r1 2+3, r2 2+1, r3 2+0.
  s = naive.step();
  EXPECT_EQ(s.admitted, 3u);
  EXPECT_EQ(s.recompute_tokens, 10u);
  EXPECT_EQ(s.prefill_tokens, 0u);
  EXPECT_EQ(s.pages_used, 10u);
  EXPECT_EQ(naive.totals().evicted, 3u);
  EXPECT_EQ(naive.totals().decoded_tokens, 8u);
}

TEST(NaiveAdmission, NoEvictionsWhenEveryRequestFitsAtFullLength) {
  // 4 running × (2 + 4) tokens = 24 ≤ 24 pages: growth never overflows.
  NaiveAdmission naive(NaiveSettings{24, 1, 0, 4, 2, 4});
  for (int i = 0; i < 200; ++i) naive.step();
  EXPECT_EQ(naive.totals().evicted, 0u);
  EXPECT_GT(naive.totals().finished, 100u);
}

TEST(NaiveAdmission, HomogeneousSaturationFallsIntoALimitCycleWithEvictions) {
  // 1,000 pages of 16 tokens; prompt 256 (16 pages), output 1,024 (64 more pages):
  // admission fills the pool with 62 prompts, whose growth needs 62 × 80 = 4,960 pages.
  NaiveAdmission naive(NaiveSettings{1000, 16, 0, 256, 256, 1024});
  std::uint64_t evictions_late = 0;
  for (int i = 0; i < 20000; ++i) {
    const NaiveStep s = naive.step();
    if (i >= 10000) evictions_late += s.evicted;
  }
  // Evictions do not die out: the second half of the run still evicts.
  EXPECT_GT(evictions_late, 0u);
  EXPECT_GT(naive.totals().recompute_tokens, 0u);
}

TEST(NaiveAdmission, StepsAllocateNothing) {
  NaiveAdmission naive(NaiveSettings{1000, 16, 3, 256, 256, 1024});
  naive.step();
  const auto before = testing::heap_allocations();
  for (int i = 0; i < 5000; ++i) naive.step();
  EXPECT_EQ(testing::heap_allocations(), before);
}

}  // namespace
}  // namespace activekv::sim
