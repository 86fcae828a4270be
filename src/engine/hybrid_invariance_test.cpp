// hybrid_invariance_test.cpp — a hybrid's output and recurrent state are the same bits however
// its tokens were cut into steps, batched, threaded or budgeted.
//
// The Gated DeltaNet's recurrence runs token by token in position order
// (delta_net.cpp), so its state after token t depends on tokens 0..t alone.
// This test writes a random-weight qwen35 GGUF (tests/reference/
// make_arch_model.py: 6 layers, Gated DeltaNet on four, gated attention on two)
// and feeds one 300-token sequence
//
//   - as one prefill chunk, in chunks of 256 (then 44), in chunks of 7 and one token at a time;
//   - in chunks of 7 batched with a second context's chunks of 5;
//   - on one thread and on two;
//   - through the ActiveKV runtime with the whole history on the device and with a quarter
//     of it (the rest staged), when the runtime keeps recurrent state;
//
// and compares by memcmp the logits at every position where two runs both
// have them, and the whole recurrent state after the last token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "activekv/state_plan.hpp"
#include "engine/delta_net.hpp"
#include "engine/forward.hpp"
#include "engine/reference_kv_access.hpp"
#include "engine/runtime_kv.hpp"

namespace activekv::engine {
namespace {

constexpr std::uint32_t kLength = 300;
constexpr std::uint32_t kContext = 512;
constexpr std::uint32_t kPageTokens = 16;
constexpr std::uint32_t kStepTokensMax = 300;

std::vector<TokenId> sequence(std::uint32_t n, std::uint32_t vocab, std::uint64_t seed) {
  std::vector<TokenId> out(n);
  std::uint64_t x = seed;
  for (std::uint32_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<TokenId>((x >> 33) % vocab);
  }
  return out;
}

// What one run leaves: the logits after each step's last token (by position) and the final state.
struct Outcome {
  std::vector<std::vector<float>> logits;  // [position] (empty where no step ended there)
  std::vector<std::byte> state;
};

std::vector<std::uint32_t> chunks_of(std::uint32_t size) {
  std::vector<std::uint32_t> steps;
  for (std::uint32_t fed = 0; fed < kLength; fed += std::min(size, kLength - fed))
    steps.push_back(std::min(size, kLength - fed));
  return steps;
}

// Passes everything through, and copies the watched context's recurrent state at each end_step
// (the last state of a run is the state after its last token).
class StateProbe final : public KvAccess {
 public:
  explicit StateProbe(KvAccess& kv) : kv_(kv) {}
  std::uint32_t length(ContextId c) const override { return kv_.length(c); }
  Status begin_step(std::span<const StepEntry> entries) override { return kv_.begin_step(entries); }
  Status write_kv(std::uint32_t layer, const float* k, const float* v) override { return kv_.write_kv(layer, k, v); }
  Status attend(std::uint32_t layer, const float* q, float* out) override { return kv_.attend(layer, q, out); }
  // The state's bytes as they stand at end_step (after the step's last layer).
  Status end_step() override {
    if (watched_) {
      Result<std::span<std::byte>> s = kv_.recurrent_state(*watched_);
      if (s.ok()) last_.assign(s->begin(), s->end());
    }
    return kv_.end_step();
  }
  Result<std::span<std::byte>> recurrent_state(ContextId c) override { return kv_.recurrent_state(c); }
  void share_threads(ThreadPool* pool) override { kv_.share_threads(pool); }
  bool attention_borrows_threads() const override { return kv_.attention_borrows_threads(); }

  void watch(ContextId c) { watched_ = c; }
  const std::vector<std::byte>& last_state() const { return last_; }

 private:
  KvAccess& kv_;
  std::optional<ContextId> watched_;
  std::vector<std::byte> last_;
};

// Feeds `tokens` to context `a` in `steps`; with `other`, a second context's tokens ride along in
// chunks of 5 in the same steps. Returns a's logits and its final state.
Outcome feed(const Model& model, KvAccess& kv, ContextId a, std::optional<ContextId> other, ThreadPool& pool,
         const std::vector<TokenId>& tokens, const std::vector<TokenId>& other_tokens,
         const std::vector<std::uint32_t>& steps) {
  StateProbe probe(kv);
  probe.watch(a);
  Forward f(model, probe, pool, best_isa(), ForwardLimits{kStepTokensMax + 5, 2, kContext});
  Outcome run;
  run.logits.resize(kLength);
  std::uint32_t fed = 0, other_fed = 0;
  for (std::uint32_t n : steps) {
    std::vector<StepInput> in = {{a, std::span<const TokenId>(tokens).subspan(fed, n), true}};
    if (other && other_fed < other_tokens.size()) {
      const std::uint32_t m = std::min<std::uint32_t>(5, static_cast<std::uint32_t>(other_tokens.size()) - other_fed);
      in.push_back({*other, std::span<const TokenId>(other_tokens).subspan(other_fed, m), true});
      other_fed += m;
    }
    Status s = f.step(in);
    EXPECT_TRUE(s.ok()) << s.error().describe();
    if (!s.ok()) return run;
    fed += n;
    run.logits[fed - 1].assign(f.logits(0).begin(), f.logits(0).end());
  }
  run.state = probe.last_state();
  return run;
}

void expect_same(const Outcome& want, const Outcome& got, const char* what) {
  ASSERT_FALSE(want.state.empty()) << what;
  ASSERT_EQ(got.state.size(), want.state.size()) << what;
  EXPECT_EQ(std::memcmp(got.state.data(), want.state.data(), want.state.size()), 0)
      << what << ": the recurrent state after the last token differs";
  std::uint32_t compared = 0;
  for (std::uint32_t p = 0; p < kLength; ++p) {
    if (want.logits[p].empty() || got.logits[p].empty()) continue;
    ++compared;
    EXPECT_EQ(std::memcmp(got.logits[p].data(), want.logits[p].data(), want.logits[p].size() * sizeof(float)), 0)
        << what << ": logits at position " << p;
  }
  EXPECT_GT(compared, 0u) << what;
}

class HybridInvariance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = ::testing::TempDir() + "hybrid_invariance.gguf";
    const std::string make = "python3 " ACTIVEKV_REFERENCE_DIR "/make_arch_model.py --arch qwen35 --mix q8 --out '" +
                             path_ + "'";
    rc_ = std::system(make.c_str());
  }
  void SetUp() override {
    if (WIFEXITED(rc_) && WEXITSTATUS(rc_) == 3) GTEST_SKIP() << "numpy or gguf missing: run scripts/install-deps.sh --test";
    ASSERT_EQ(rc_, 0) << "make_arch_model.py failed";
    Result<std::unique_ptr<Model>> m = Model::load(path_);
    ASSERT_TRUE(m.ok()) << m.error().describe();
    model_ = std::move(m).value();
    ASSERT_GT(model_->config().recurrent_layers, 0u);
    tokens_ = sequence(kLength, model_->config().vocab, 11);
    other_ = sequence(kLength, model_->config().vocab, 12);
  }

  // A run over the contiguous oracle.
  Outcome oracle_run(const std::vector<std::uint32_t>& steps, bool batched, ThreadPool& pool) {
    ReferenceKvAccess kv(model_->geometry(), model_->config().q_heads, kPageTokens);
    const ContextId a = kv.open(kContext);
    std::optional<ContextId> b;
    if (batched) b = kv.open(kContext);
    return feed(*model_, kv, a, b, pool, tokens_, other_, steps);
  }

  // A run through the ActiveKV runtime (host backend, history staged through the tiles) with
  // `fraction` of the history's pages on the device.
  Outcome runtime_run(const std::vector<std::uint32_t>& steps, double fraction, bool batched) {
    const ForwardLimits limits{kStepTokensMax + 5, 2, kContext};
    MemorySettings memory;
    memory.page_tokens = kPageTokens;
    memory.tile_tokens = 64;
    memory.tiles = 2;
    memory.max_context_tokens = kContext;
    memory.max_seqs = 2;
    // The floor follows the largest step (the second context appends 5 at a time).
    memory.chunk_tokens = std::max<std::uint32_t>(*std::max_element(steps.begin(), steps.end()), 5);
    KvRuntimeSettings settings = runtime_settings(*model_, memory, limits);
    const Geometry& g = settings.memory.geometry;
    const auto aligned = [](std::uint64_t b) {
      return (b + arena_alignment_bytes - 1) / arena_alignment_bytes * arena_alignment_bytes;
    };
    const std::uint64_t pages_one = std::uint64_t{g.dense_layers} * (kContext / kPageTokens);
    const auto pages = static_cast<std::uint64_t>(std::ceil(static_cast<double>(2 * pages_one) * fraction));
    settings.memory.host_pool_bytes =
        2 * (std::uint64_t{g.dense_layers} * kContext * g.row_bytes() + state_bytes_per_history(settings.memory));
    settings.memory.device_pool_bytes = aligned(std::uint64_t{memory.tiles} * memory.tile_tokens * g.row_bytes()) +
                                        aligned(pages * kPageTokens * g.row_bytes()) +
                                        aligned(2 * g.recurrent_state_bytes);
    BackendOptions options;
    options.compute_threads = 2;
    Result<std::unique_ptr<Backend>> backend = make_backend("host", options);
    EXPECT_TRUE(backend.ok());
    if (!backend.ok()) return {};
    Result<std::unique_ptr<KvRuntime>> rt = KvRuntime::create(settings, **backend);
    EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
    if (!rt.ok()) return {};
    Result<AdmitResult> a = (*rt)->open_context(1, kContext);
    Result<AdmitResult> b = (*rt)->open_context(2, kContext);
    EXPECT_TRUE(a.ok() && a->outcome == AdmitOutcome::admitted && b.ok() && b->outcome == AdmitOutcome::admitted);
    if (!a.ok() || !b.ok()) return {};
    RuntimeKv kv(**rt);
    std::optional<ContextId> other;
    if (batched) other = b->handle;
    Outcome out = feed(*model_, kv, a->handle, other, pool_, tokens_, other_, steps);
    const std::uint64_t staged = (*rt)->counters().bytes_staged;
    if (fraction < 1.0) {
      EXPECT_GT(staged, 0u) << "a quarter of the pages on the device: history must be staged";
    }
    return out;
  }

  static inline std::string path_;
  static inline int rc_ = 0;
  std::unique_ptr<Model> model_;
  std::vector<TokenId> tokens_, other_;
  ThreadPool pool_{2};
};

TEST_F(HybridInvariance, EveryChunkingBatchAndThreadCountGivesTheSameBits) {
  const Outcome whole = oracle_run({kLength}, false, pool_);
  const Outcome tokenwise = oracle_run(chunks_of(1), false, pool_);
  expect_same(tokenwise, whole, "one chunk vs one token at a time");
  expect_same(tokenwise, oracle_run(chunks_of(256), false, pool_), "chunks of 256");
  expect_same(tokenwise, oracle_run(chunks_of(7), false, pool_), "chunks of 7");
  expect_same(tokenwise, oracle_run(chunks_of(7), true, pool_), "chunks of 7 batched with a second context");
  ThreadPool one{1};
  expect_same(tokenwise, oracle_run(chunks_of(7), false, one), "one thread");
  // A model whose state changed nothing would pass the above: the state must not be all zero.
  bool nonzero = false;
  for (std::byte b : whole.state) nonzero = nonzero || b != std::byte{0};
  EXPECT_TRUE(nonzero);
}

TEST_F(HybridInvariance, EveryDeviceBudgetGivesTheSameBits) {
  const Outcome whole = runtime_run({kLength}, 1.0, false);
  expect_same(whole, runtime_run(chunks_of(256), 1.0, false), "runtime: one chunk vs chunks of 256");
  expect_same(whole, runtime_run(chunks_of(7), 0.25, false), "runtime: a quarter of the pages, chunks of 7");
  expect_same(whole, runtime_run(chunks_of(1), 0.25, true), "runtime: a quarter, one token at a time, batched");
}

// The delta rule's instruction-set copies (delta_net.hpp): the processor's and the baseline's give the
// same state and output bits, token after token, at the state sizes of the test files and of Qwen3.5.
TEST(DeltaRule, EveryInstructionSetGivesTheSameBits) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const std::uint32_t S : {16u, 64u, 128u, 13u}) {
    std::vector<float> m_a(std::size_t{S} * S, 0.0f), m_b(m_a), q(S), k(S), v(S), o_a(S), o_b(S);
    for (int t = 0; t < 64; ++t) {
      for (std::uint32_t i = 0; i < S; ++i) q[i] = uniform(rng), k[i] = uniform(rng) / std::sqrt(float(S)), v[i] = uniform(rng);
      const float decay = 0.5f + 0.5f * std::fabs(uniform(rng)), beta = std::fabs(uniform(rng));
      delta_rule_token(m_a.data(), q.data(), k.data(), v.data(), decay, beta, o_a.data(), S);
      delta_rule_token_baseline(m_b.data(), q.data(), k.data(), v.data(), decay, beta, o_b.data(), S);
      ASSERT_EQ(std::memcmp(o_a.data(), o_b.data(), S * sizeof(float)), 0) << "S " << S << " token " << t << ": output";
      ASSERT_EQ(std::memcmp(m_a.data(), m_b.data(), m_a.size() * sizeof(float)), 0) << "S " << S << " token " << t << ": state";
    }
  }
}

}  // namespace
}  // namespace activekv::engine
