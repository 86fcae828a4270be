// q8_invariance_test.cpp — with --activations q8 (matmul_q8.hpp) the engine keeps its promise:
// the logits are the same bits however the tokens were cut into steps, batched or threaded.
//
// The test writes random-weight Llama GGUFs (tests/reference/make_arch_model.py: 256 wide, FFN
// 512) in three mixes, so that every product takes an 8-bit path: q4_k_m (Q4_K with attn_v,
// ffn_down and the output in Q6_K: matmul_q8.hpp), q8 (Q8_0 attention and output, Q4_0 FFN) and
// legacy (Q5_0 attention, Q4_1 FFN, Q5_1 output: matmul_q8_0.hpp). Each feeds one 160-token
// sequence as one chunk, in chunks of 7, one token at a time, in chunks of 7 batched with a second
// context, and on one thread; the logits at every position two runs both have are compared by
// memcmp. A run with q16 must give other bits (so the 8-bit path did run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/forward.hpp"
#include "engine/reference_kv_access.hpp"

namespace activekv::engine {
namespace {

constexpr std::uint32_t kLength = 160;
constexpr std::uint32_t kContext = 256;
constexpr std::uint32_t kPageTokens = 16;

std::vector<TokenId> sequence(std::uint32_t n, std::uint32_t vocab, std::uint64_t seed) {
  std::vector<TokenId> out(n);
  std::uint64_t x = seed;
  for (std::uint32_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<TokenId>((x >> 33) % vocab);
  }
  return out;
}

std::vector<std::uint32_t> chunks_of(std::uint32_t size) {
  std::vector<std::uint32_t> steps;
  for (std::uint32_t fed = 0; fed < kLength; fed += std::min(size, kLength - fed))
    steps.push_back(std::min(size, kLength - fed));
  return steps;
}

using Logits = std::vector<std::vector<float>>;  // [position] (empty where no step ended there)

class Q8Invariance : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string path = ::testing::TempDir() + "q8_invariance_" + GetParam() + ".gguf";
    const std::string make = std::string("python3 " ACTIVEKV_REFERENCE_DIR "/make_arch_model.py --arch llama --mix ") +
                             GetParam() + " --embedding 256 --ffn 512 --heads 4 --kv-heads 2 --out '" + path + "'";
    const int rc = std::system(make.c_str());
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) GTEST_SKIP() << "numpy or gguf missing: run scripts/install-deps.sh --test";
    ASSERT_EQ(rc, 0) << "make_arch_model.py failed";
    Result<std::unique_ptr<Model>> m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error().describe();
    model_ = std::move(m).value();
    tokens_ = sequence(kLength, model_->config().vocab, 21);
    other_ = sequence(kLength, model_->config().vocab, 22);
  }

  // Feeds the tokens in `steps`; with `batched`, a second context's tokens ride along in chunks of 5.
  Logits run(const std::vector<std::uint32_t>& steps, bool batched, ThreadPool& pool, Activations activations) {
    ReferenceKvAccess kv(model_->geometry(), model_->config().q_heads, kPageTokens);
    const ContextId a = kv.open(kContext);
    std::optional<ContextId> b;
    if (batched) b = kv.open(kContext);
    Forward f(*model_, kv, pool, best_isa(), ForwardLimits{kLength + 5, 2, kContext}, activations);
    Logits out(kLength);
    std::uint32_t fed = 0, other_fed = 0;
    for (std::uint32_t n : steps) {
      std::vector<StepInput> in = {{a, std::span<const TokenId>(tokens_).subspan(fed, n), true}};
      if (b && other_fed + 5 <= other_.size()) {
        in.push_back({*b, std::span<const TokenId>(other_).subspan(other_fed, 5), true});
        other_fed += 5;
      }
      Status s = f.step(in);
      EXPECT_TRUE(s.ok()) << s.error().describe();
      if (!s.ok()) return out;
      fed += n;
      out[fed - 1].assign(f.logits(0).begin(), f.logits(0).end());
    }
    return out;
  }

  static void expect_same(const Logits& want, const Logits& got, const char* what) {
    std::uint32_t compared = 0;
    for (std::uint32_t p = 0; p < kLength; ++p) {
      if (want[p].empty() || got[p].empty()) continue;
      ++compared;
      ASSERT_EQ(want[p].size(), got[p].size());
      EXPECT_EQ(std::memcmp(got[p].data(), want[p].data(), want[p].size() * sizeof(float)), 0)
          << what << ": logits at position " << p;
    }
    EXPECT_GT(compared, 0u) << what;
  }

  std::unique_ptr<Model> model_;
  std::vector<TokenId> tokens_, other_;
  ThreadPool pool_{2};
};

TEST_P(Q8Invariance, EveryChunkingBatchAndThreadCountGivesTheSameBits) {
  const Logits tokenwise = run(chunks_of(1), false, pool_, Activations::q8);
  expect_same(tokenwise, run({kLength}, false, pool_, Activations::q8), "one chunk vs one token at a time");
  expect_same(tokenwise, run(chunks_of(7), false, pool_, Activations::q8), "chunks of 7");
  expect_same(tokenwise, run(chunks_of(7), true, pool_, Activations::q8), "chunks of 7 batched with a second context");
  ThreadPool one{1};
  expect_same(tokenwise, run(chunks_of(7), false, one, Activations::q8), "one thread");
  // The 8-bit path ran: the 16-bit one rounds differently.
  const Logits q16 = run({kLength}, false, pool_, Activations::q16);
  ASSERT_FALSE(q16[kLength - 1].empty());
  EXPECT_NE(std::memcmp(q16[kLength - 1].data(), tokenwise[kLength - 1].data(), q16[kLength - 1].size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Mixes, Q8Invariance, ::testing::Values("q4_k_m", "q8", "legacy"));

}  // namespace
}  // namespace activekv::engine
