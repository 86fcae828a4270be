// forward_test.cpp — the forward pass on the real model (skipped, saying so,
// when the default model is not installed), over the reference KV:
//   - greedy next token after "The capital of France is" is " Paris";
//   - how a prompt is split (one prefill, chunks, token by token) and whether
//     contexts share a step cannot change a single bit of the logits;
//   - bad steps are refused before anything changes;
//   - a product's bits do not depend on the products it shares a call with (an fp32 matrix beside
//     a quantised one leaves the quantised one on its own path).
#include "engine/forward.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "engine/blocks.hpp"
#include "engine/default_model_fixture.hpp"
#include "engine/reference_kv_access.hpp"
#include "engine/sampler.hpp"

namespace activekv::engine {
namespace {

// "The capital of France is" as ids of the model's vocabulary, and a second prompt of arbitrary ids.
const std::vector<TokenId> kFrance = {504, 3575, 282, 4649, 314};
const std::vector<TokenId> kOther = {1780, 314, 216, 34, 29, 34, 47};

using testing_model::g_model;
using testing_model::g_pool;

class ForwardTest : public testing_model::DefaultModel {
 protected:
  std::unique_ptr<ReferenceKvAccess> make_kv() const {
    return std::make_unique<ReferenceKvAccess>(g_model->geometry(), g_model->config().q_heads, 16);
  }
  std::string token_text(TokenId id) const {
    Result<std::vector<std::string_view>> tokens = g_model->file().get_string_array("tokenizer.ggml.tokens");
    EXPECT_TRUE(tokens.ok());
    return std::string((*tokens)[id]);
  }

  // Feeds `tokens` in chunks of `chunk` and returns the last logits.
  std::vector<float> run(const std::vector<TokenId>& tokens, std::uint32_t chunk) const {
    auto kv = make_kv();
    const ContextId c = kv->open(64);
    Forward f(*g_model, *kv, *g_pool, best_isa(), ForwardLimits{16, 4});
    for (std::size_t fed = 0; fed < tokens.size(); fed += chunk) {
      const std::size_t n = std::min<std::size_t>(chunk, tokens.size() - fed);
      const StepInput in{c, std::span<const TokenId>(tokens).subspan(fed, n), true};
      Status s = f.step({&in, 1});
      EXPECT_TRUE(s.ok());
    }
    const std::span<const float> l = f.logits(0);
    return {l.begin(), l.end()};
  }
};

TEST_F(ForwardTest, GreedyAnswersTheCapitalOfFrance) {
  const std::vector<float> logits = run(kFrance, 8);
  EXPECT_EQ(token_text(Sampler::argmax(logits)), "\xC4\xA0Paris");  // "ĠParis": " Paris"
}

TEST_F(ForwardTest, ChunkingNeverChangesABit) {
  const std::vector<float> whole = run(kOther, 16);
  for (std::uint32_t chunk : {1u, 2u, 3u}) {
    const std::vector<float> split = run(kOther, chunk);
    ASSERT_EQ(split.size(), whole.size());
    EXPECT_EQ(std::memcmp(split.data(), whole.data(), whole.size() * sizeof(float)), 0) << "chunk " << chunk;
  }
}

TEST_F(ForwardTest, BatchingContextsNeverChangesABit) {
  const std::vector<float> alone_a = run(kFrance, 16);
  const std::vector<float> alone_b = run(kOther, 16);
  auto kv = make_kv();
  const ContextId a = kv->open(64);
  const ContextId b = kv->open(64);
  Forward f(*g_model, *kv, *g_pool, best_isa(), ForwardLimits{16, 4});
  const StepInput both[] = {{a, kFrance, true}, {b, kOther, true}};
  ASSERT_TRUE(f.step(both).ok());
  EXPECT_EQ(std::memcmp(f.logits(0).data(), alone_a.data(), alone_a.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(f.logits(1).data(), alone_b.data(), alone_b.size() * sizeof(float)), 0);
}

TEST_F(ForwardTest, AProductsBitsDoNotDependOnTheProductsSharingItsCall) {
  const LayerWeights& w = g_model->layer(0);
  const std::uint32_t cols = w.q.cols, rows = 3;
  // An fp32 matrix of 5 outputs, as a DeltaNet's ssm_alpha beside its attn_qkv.
  std::vector<float> f32(std::size_t{5} * cols);
  for (std::size_t i = 0; i < f32.size(); ++i) f32[i] = 0.01f * static_cast<float>(i % 37) - 0.15f;
  const MatrixView small{GgmlType::f32, reinterpret_cast<const std::uint8_t*>(f32.data()), cols, 5, cols * 4u};
  std::vector<float> x(std::size_t{rows} * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.02f * static_cast<float>(i % 29) - 0.25f;
  for (const Activations width : {Activations::q16, Activations::q8}) {
    auto kv = make_kv();
    PhaseTimes times;
    Blocks b(*g_model, *kv, *g_pool, best_isa(), width, rows, 64, times);
    std::vector<float> alone(std::size_t{rows} * w.q.rows), grouped(alone.size()), side(std::size_t{rows} * 5);
    const Blocks::Product one[] = {{&w.q, x.data(), alone.data()}};
    b.matmul(rows, one);
    const Blocks::Product two[] = {{&w.q, x.data(), grouped.data()}, {&small, x.data(), side.data()}};
    b.matmul(rows, two);
    EXPECT_EQ(std::memcmp(alone.data(), grouped.data(), alone.size() * sizeof(float)), 0)
        << "activations " << static_cast<int>(width);
    std::vector<float> side_alone(side.size());
    const Blocks::Product three[] = {{&small, x.data(), side_alone.data()}};
    b.matmul(rows, three);
    EXPECT_EQ(std::memcmp(side.data(), side_alone.data(), side.size() * sizeof(float)), 0);
  }
}

TEST_F(ForwardTest, BadStepsAreRefusedAndChangeNothing) {
  auto kv = make_kv();
  const ContextId c = kv->open(8);
  Forward f(*g_model, *kv, *g_pool, best_isa(), ForwardLimits{4, 2});
  const TokenId outside = g_model->config().vocab;
  const StepInput bad_token{c, {&outside, 1}, true};
  Status s = f.step({&bad_token, 1});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().setting, "tokens");
  const StepInput too_many{c, kOther, true};  // 7 tokens > step_tokens_max 4
  s = f.step({&too_many, 1});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().setting, "step_tokens_max");
  const StepInput one_token{c, std::span<const TokenId>(kFrance).subspan(0, 1), false};
  const StepInput twice[] = {one_token, one_token};
  s = f.step(twice);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("twice"), std::string::npos);
  const StepInput three[] = {one_token, one_token, one_token};
  s = f.step(three);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().setting, "step_entries_max");
  const StepInput empty{c, {}, true};
  EXPECT_FALSE(f.step({&empty, 1}).ok());
  EXPECT_EQ(kv->length(c), 0u);
  // Past the context's own limit (8 tokens): the KV refuses at begin_step.
  const StepInput four{c, std::span<const TokenId>(kOther).subspan(0, 4), false};
  ASSERT_TRUE(f.step({&four, 1}).ok());
  ASSERT_TRUE(f.step({&four, 1}).ok());
  s = f.step({&four, 1});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().setting, "--max-context");
  EXPECT_EQ(kv->length(c), 8u);
}

}  // namespace
}  // namespace activekv::engine
