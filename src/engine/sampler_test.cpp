// sampler_test.cpp — greedy is the argmax (lowest id on ties); sampling is
// reproducible from the seed, follows the distribution, respects top-p;
// bad settings are refused by name; sampling allocates nothing.
#include "engine/sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "testing/alloc_counter.hpp"

namespace activekv::engine {
namespace {

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  Sampler s(SamplerSettings{}, 5);
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1u);
  EXPECT_EQ(Sampler::argmax(logits), 1u);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::vector<float> logits(100);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(static_cast<double>(i) * 0.37)) * 2.0f;
  auto draw = [&](std::uint64_t seed) {
    Sampler s(SamplerSettings{seed, 1.0f, 1.0f}, 100);
    std::vector<std::uint32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, ResetDrawsAsAFreshSamplerAndAllocatesNothing) {
  std::vector<float> logits(100);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::cos(static_cast<double>(i) * 0.21)) * 3.0f;
  Sampler fresh(SamplerSettings{99, 0.8f, 0.9f}, 100);
  Sampler reused(SamplerSettings{1, 1.5f, 0.5f}, 100);
  for (int i = 0; i < 7; ++i) reused.sample(logits);  // a previous occupant's draws
  std::vector<std::uint32_t> a, b;
  a.reserve(40);
  b.reserve(40);
  const std::uint64_t before = activekv::testing::heap_allocations();
  reused.reset(SamplerSettings{99, 0.8f, 0.9f});
  for (int i = 0; i < 40; ++i) {
    a.push_back(fresh.sample(logits));
    b.push_back(reused.sample(logits));
  }
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
  EXPECT_EQ(a, b);
  EXPECT_EQ(reused.settings().temperature, 0.8f);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s(SamplerSettings{7, 1.0f, 1.0f}, 3);
  std::vector<int> counts(3);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++counts[s.sample(logits)];
  EXPECT_NEAR(counts[0] / double(draws), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(draws), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(draws), 0.2, 0.02);
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  // Probabilities 0.5, 0.3, 0.2: top_p 0.6 keeps {0, 1}; 0.4 keeps {0}.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler narrow(SamplerSettings{1, 1.0f, 0.6f}, 3);
  Sampler one(SamplerSettings{1, 1.0f, 0.4f}, 3);
  std::vector<int> counts(3);
  for (int i = 0; i < 5000; ++i) {
    ++counts[narrow.sample(logits)];
    EXPECT_EQ(one.sample(logits), 0u);
  }
  EXPECT_EQ(counts[2], 0);
  EXPECT_GT(counts[1], 1500);  // 0.3 / 0.8 of the draws ≈ 1875
}

TEST(Sampler, BadSettingsAreRefusedByName) {
  EXPECT_EQ(validate(SamplerSettings{0, -1.0f, 1.0f}).error().setting, "--temperature");
  EXPECT_EQ(validate(SamplerSettings{0, NAN, 1.0f}).error().setting, "--temperature");
  EXPECT_EQ(validate(SamplerSettings{0, 1.0f, 0.0f}).error().setting, "--top-p");
  EXPECT_EQ(validate(SamplerSettings{0, 1.0f, 1.5f}).error().setting, "--top-p");
  EXPECT_TRUE(validate(SamplerSettings{0, 0.7f, 0.9f}).ok());
}

TEST(Sampler, SamplingAllocatesNothing) {
  std::vector<float> logits(1000, 0.0f);
  logits[3] = 5.0f;
  Sampler s(SamplerSettings{3, 0.8f, 0.9f}, 1000);
  const auto before = activekv::testing::heap_allocations();
  for (int i = 0; i < 20; ++i) s.sample(logits);
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
}

}  // namespace
}  // namespace activekv::engine
