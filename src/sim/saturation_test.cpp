// saturation_test.cpp — under an endless queue the core's admission never evicts; naive does.
#include "sim/saturation.hpp"

#include <gtest/gtest.h>

#include "activekv/size.hpp"

namespace activekv::sim {
namespace {

SaturationSettings short_run() {
  SaturationSettings s;
  s.prompt_tokens = 512;
  s.output_tokens = 512;
  s.steps = 2048;
  s.window_steps = 128;
  s.prefill_workspace_bytes = GiB;
  return s;
}

TEST(Saturation, CoreAdmissionStaysFreeOfEvictionsWhileNaiveCycles) {
  const Scenario scenario = make_scenario("hybrid-27b").value();
  const SaturationResult r = run_saturation(scenario, short_run()).value();
  ASSERT_EQ(r.windows.size(), 16u);
  // ActiveKV: nothing is ever evicted; the concurrency is the core's (32 histories).
  EXPECT_EQ(r.activekv.evictions, 0u);
  for (const SaturationWindow& w : r.windows) EXPECT_EQ(w.activekv_evictions, 0u);
  EXPECT_EQ(r.activekv_concurrency, 32u);
  EXPECT_GT(r.activekv.finished, 0u);
  EXPECT_GT(r.queued_by_core, 0u);  // the queue really was saturated
  // Naive on the same card: 16,896 pages; a request admitted with 32 prompt pages + 147
  // recurrent pages grows by 32 more, so admission overcommits and evictions recur.
  EXPECT_EQ(r.naive_capacity_pages, 16896u);
  EXPECT_GT(r.naive.evictions, 0u);
  EXPECT_GT(r.naive.recompute_tokens, 0u);
  std::uint32_t late_evictions = 0;
  for (std::size_t i = r.windows.size() / 2; i < r.windows.size(); ++i) late_evictions += r.windows[i].naive_evictions;
  EXPECT_GT(late_evictions, 0u);  // not a transient: the second half still evicts
  // Headroom: every prefill takes the workspace back, and each taking is counted.
  EXPECT_GT(r.headroom_takings, 0u);
  // Each taking withdraws the workspace: 1 GiB of 64 KiB pages (16 tokens × 4,096-byte rows) = 16,384 pages.
  EXPECT_EQ(r.headroom_pages_taken, r.headroom_takings * 16384u);
  EXPECT_EQ(r.heap_allocations, 0u);
  EXPECT_GT(r.activekv.seconds, 0.0);
  EXPECT_GT(r.naive.seconds, 0.0);
}

TEST(Saturation, RefusesBadSettingsByName) {
  const Scenario scenario = make_scenario("hybrid-27b").value();
  SaturationSettings s = short_run();
  s.output_tokens = 40000;
  EXPECT_EQ(run_saturation(scenario, s).error().setting, "--prompt-tokens");
  s = short_run();
  s.steps = 10;
  EXPECT_EQ(run_saturation(scenario, s).error().setting, "--saturation-steps");
  s = short_run();
  s.variant = Variant::stock;
  EXPECT_EQ(run_saturation(scenario, s).error().setting, "--variant");
}

}  // namespace
}  // namespace activekv::sim
