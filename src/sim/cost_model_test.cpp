// cost_model_test.cpp — the cost model's arithmetic, pinned on cases worked by hand.
#include "sim/cost_model.hpp"

#include <gtest/gtest.h>

#include "activekv/size.hpp"

namespace activekv::sim {
namespace {

CostModel round_model() {
  CostModel cost;
  cost.h2d_bytes_per_second = 1e10;  // 10 GB/s
  cost.d2h_bytes_per_second = 5e9;   // 5 GB/s
  cost.d2d_bytes_per_second = 1e11;  // 100 GB/s
  cost.copy_latency_seconds = 10e-6;
  cost.attention_seconds_per_byte = 1e-12;  // 1 TB/s
  cost.attention_launch_seconds = 5e-6;
  cost.non_attention_seconds_per_step = 0.02;
  cost.non_attention_seconds_per_token = 1e-4;
  return cost;
}

TEST(CostModel, CopiesChargeLatencyPerCommandPlusBytesOverBandwidth) {
  const CostModel cost = round_model();
  // h2d: 4 commands × 10 µs + 100 MB / 10 GB/s = 40 µs + 10 ms = 10.040 ms
  EXPECT_DOUBLE_EQ(cost.h2d_seconds(100'000'000, 4), 0.010040);
  // d2h: 1 × 10 µs + 4096 B / 5 GB/s = 10 µs + 0.8192 µs = 10.8192 µs
  EXPECT_DOUBLE_EQ(cost.d2h_seconds(4096, 1), 10.8192e-6);
  // d2d: 2 × 10 µs + 1 GB / 100 GB/s = 20 µs + 10 ms = 10.020 ms
  EXPECT_DOUBLE_EQ(cost.d2d_seconds(1'000'000'000, 2), 0.010020);
  // No commands, no bytes: free.
  EXPECT_DOUBLE_EQ(cost.h2d_seconds(0, 0), 0.0);
}

TEST(CostModel, AttentionAndNonAttentionWorkedByHand) {
  const CostModel cost = round_model();
  // attention: 5 µs launch + 2 GB × 1 ps/B = 5 µs + 2 ms = 2.005 ms
  EXPECT_DOUBLE_EQ(cost.attention_seconds(2'000'000'000), 0.002005);
  // non-attention for 32 tokens: 20 ms + 32 × 0.1 ms = 23.2 ms
  EXPECT_DOUBLE_EQ(cost.non_attention_seconds(32), 0.0232);
}

TEST(CostModel, DerivedFromACardWorkedByHand) {
  CardSpec card{};
  card.memory_bytes_per_second = 1e12;
  card.memory_efficiency = 0.5;  // effective 500 GB/s
  card.link_bytes_per_second_achieved = 2e10;
  card.copy_latency_seconds = 1e-6;
  card.matmul_flops_per_second = 1e14;
  card.matmul_efficiency = 0.5;  // effective 50 TFLOP/s
  card.attention_launch_seconds = 2e-6;
  card.h2d_queues = 1;
  card.d2h_queues = 1;
  card.d2d_queues = 0;
  const CostModel cost = make_cost_model(card, ModelCost{1'000'000'000, 1e9});
  // attention: 1 / 500 GB/s = 2 ps per byte
  EXPECT_DOUBLE_EQ(cost.attention_seconds_per_byte, 2e-12);
  // d2d reads and writes every byte: 500 GB/s / 2 = 250 GB/s
  EXPECT_DOUBLE_EQ(cost.d2d_bytes_per_second, 2.5e11);
  // weights streamed once per step: 1 GB / 500 GB/s = 2 ms
  EXPECT_DOUBLE_EQ(cost.non_attention_seconds_per_step, 0.002);
  // per token: 2 × 1e9 FLOPs / 50 TFLOP/s = 40 µs
  EXPECT_DOUBLE_EQ(cost.non_attention_seconds_per_token, 40e-6);
  EXPECT_DOUBLE_EQ(cost.h2d_bytes_per_second, 2e10);
  EXPECT_TRUE(cost.validate().ok());
}

TEST(CostModel, SeedCardFiguresWorkedByHand) {
  const CardSpec arc = find_card("arc-pro-32gb").value();
  // PCIe 4.0 x8: 16 GT/s × 8 lanes × 128/130 / 8 bits = 15.7538 GB/s theoretical
  EXPECT_NEAR(arc.link_bytes_per_second_theoretical, 15.7538e9, 1e5);
  EXPECT_DOUBLE_EQ(arc.link_bytes_per_second_achieved, 12.5e9);
  // 14 GiB of 4-bit weights streamed at 608 GB/s × 0.8 = 486.4 GB/s:
  // 15,032,385,536 B / 486.4e9 B/s = 30.905 ms per step
  const CostModel cost = make_cost_model(arc, ModelCost{14 * GiB, 27e9});
  EXPECT_NEAR(cost.non_attention_seconds_per_step, 0.0309054, 1e-6);
  // a 32K-token hybrid-27b history is 2 GiB; reading it once: 2,147,483,648 / 486.4e9 = 4.415 ms
  EXPECT_NEAR(cost.attention_seconds(2 * GiB) - cost.attention_launch_seconds, 0.00441506, 1e-7);
  // staging it over the link instead: 2,147,483,648 / 12.5e9 = 171.8 ms (before per-copy latency)
  EXPECT_NEAR(cost.h2d_seconds(2 * GiB, 1) - cost.copy_latency_seconds, 0.171799, 1e-6);

  const CardSpec h200 = find_card("h200").value();
  // PCIe Gen5 x16: 32 GT/s × 16 × 128/130 / 8 = 63.015 GB/s theoretical
  EXPECT_NEAR(h200.link_bytes_per_second_theoretical, 63.0154e9, 1e5);
  EXPECT_DOUBLE_EQ(h200.memory_bytes_per_second, 4.8e12);
}

TEST(CostModel, RefusesBadFieldsByName) {
  CostModel cost = round_model();
  EXPECT_TRUE(cost.validate().ok());
  cost.h2d_bytes_per_second = 0;
  ASSERT_FALSE(cost.validate().ok());
  EXPECT_EQ(cost.validate().error().setting, "h2d_bytes_per_second");
  cost = round_model();
  cost.h2d_queues = 0;
  EXPECT_EQ(cost.validate().error().setting, "h2d_queues");
  EXPECT_FALSE(find_card("a100").ok());
  EXPECT_EQ(find_card("a100").error().setting, "--card");
}

}  // namespace
}  // namespace activekv::sim
