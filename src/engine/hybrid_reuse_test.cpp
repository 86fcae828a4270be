// hybrid_reuse_test.cpp — a hybrid's follow-up through a state checkpoint equals no reuse, byte for byte.
//
// A hybrid's recurrent state exists at one position only, so a retained history keeps checkpoints
// of it (kv_runtime_state.cpp): the newest page boundary reached, the prompt's last whole page, and
// every K pages. A follow-up adopts the attention pages and the state up to the newest checkpoint
// at or before its match point, and the engine prefills the rest (engine::generate starts at the
// context's length). This test writes a random-weight qwen35 GGUF (tests/reference/
// make_arch_model.py: 6 layers, Gated DeltaNet on four, gated attention on two), runs a first
// request of 230 prompt tokens and 16 output tokens through engine::generate on the ActiveKV
// runtime (prefix reuse on, 16-token pages, a checkpoint every 4 pages), retains it, and sends a
// follow-up whose prompt shares
//
//   - the whole first conversation (match 245 → the newest checkpoint, 240);
//   - the first prompt only (match 229 → the prompt's checkpoint, 224);
//   - 180 tokens (match 176, between checkpoints → the K-page checkpoint at 128, 48 recomputed);
//   - 10 tokens (less than one page → nothing adopted);
//
// and compares by memcmp every logit it sampled from, and its tokens, with the same follow-up on a
// runtime that retained nothing. It also checks that the adopted length is what explain() says the
// state was restored from, and that the follow-up's decode steps allocate nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "activekv/state_plan.hpp"
#include "engine/engine.hpp"
#include "engine/generate.hpp"
#include "engine/runtime_kv.hpp"
#include "engine/sampler.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::engine {
namespace {

constexpr std::uint32_t kContext = 512;
constexpr std::uint32_t kPageTokens = 16;
constexpr std::uint32_t kCheckpointPages = 4;
constexpr std::uint32_t kChunk = 96;  // prefill chunks cut across page and checkpoint boundaries
constexpr std::uint32_t kFirstPrompt = 230;
constexpr std::uint32_t kOutput = 16;

std::vector<TokenId> sequence(std::uint32_t n, std::uint32_t vocab, std::uint64_t seed) {
  std::vector<TokenId> out(n);
  std::uint64_t x = seed;
  for (std::uint32_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<TokenId>((x >> 33) % vocab);
  }
  return out;
}

// What one request leaves: the tokens it chose, the logits each came from, and what it adopted.
struct Answer {
  std::vector<TokenId> tokens;
  std::vector<std::vector<float>> logits;
  std::uint32_t reused_tokens = 0;
  std::uint32_t state_restored_tokens = 0;
  std::uint64_t decode_allocations = 0;  // heap allocations after the second decode step
};

// Logits land in vectors sized before the request, so recording them allocates nothing.
struct Recorder {
  Answer* answer;
  std::uint32_t logits_seen = 0;
  std::uint64_t allocations_at_second = 0;
};

bool record_token(void* user, TokenId token) {
  auto* r = static_cast<Recorder*>(user);
  r->answer->tokens.push_back(token);
  if (r->answer->tokens.size() == 2) r->allocations_at_second = testing::heap_allocations();
  return true;
}

void record_logits(void* user, std::span<const float> logits) {
  auto* r = static_cast<Recorder*>(user);
  std::vector<float>& slot = r->answer->logits[r->logits_seen++];
  AK_ASSERT(slot.size() == logits.size(), "test: a logits vector sized to the vocabulary");
  std::copy(logits.begin(), logits.end(), slot.begin());
}

// One runtime (host backend, prefix reuse on) and its engine, for a sequence of requests.
class Rig {
 public:
  // `cache_states` > 0: a host prefix cache of 2 × that many states plus 128 cache pages of bytes
  // (half for states: at least that many), with `max_seqs` contexts (one: a stranger takes the only history).
  explicit Rig(const std::string& path, std::uint32_t cache_states = 0, std::uint32_t max_seqs = 2) {
    Result<std::unique_ptr<Model>> m = Model::load(path);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().describe());
    if (!m.ok()) return;
    const ForwardLimits limits{kChunk, 1, kContext};
    MemorySettings memory;
    memory.page_tokens = kPageTokens;
    memory.tile_tokens = 64;
    memory.tiles = 2;
    memory.max_context_tokens = kContext;
    memory.max_seqs = max_seqs;
    memory.chunk_tokens = kChunk;
    memory.state_checkpoint_pages = kCheckpointPages;
    KvRuntimeSettings settings = runtime_settings(**m, memory, limits);
    settings.prefix_reuse = true;
    settings.memory.state_checkpoints = true;
    const Geometry& g = settings.memory.geometry;
    settings.memory.host_pool_bytes =
        2 * (std::uint64_t{g.dense_layers} * kContext * g.row_bytes() + state_bytes_per_history(settings.memory));
    if (cache_states > 0) {
      // Half of it is for states (the plan's rule): 2 × cache_states states, then 64 pages' bytes.
      settings.memory.prefix_cache_bytes = 2ull * cache_states * g.recurrent_state_bytes +
                                           2ull * 64 * kPageTokens * g.row_bytes() * g.dense_layers;
      settings.memory.host_pool_bytes += settings.memory.prefix_cache_bytes;
    }
    settings.memory.device_pool_bytes = 64ull << 20;
    BackendOptions options;
    options.compute_threads = 2;
    Result<std::unique_ptr<Backend>> b = make_backend("host", options);
    EXPECT_TRUE(b.ok());
    if (!b.ok()) return;
    backend_ = std::move(b).value();
    Result<std::unique_ptr<KvRuntime>> rt = KvRuntime::create(settings, *backend_);
    EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
    if (!rt.ok()) return;
    runtime_ = std::move(rt).value();
    EngineSettings es;
    es.threads = 2;
    es.limits = limits;
    Result<std::unique_ptr<Engine>> e = Engine::create(std::move(m).value(), std::make_unique<RuntimeKv>(*runtime_), es);
    EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().describe());
    if (e.ok()) engine_ = std::move(e).value();
  }
  ~Rig() {
    engine_.reset();  // before the runtime its KvAccess narrows
  }
  bool ready() const { return engine_ != nullptr; }
  KvRuntime& runtime() { return *runtime_; }

  // One request: admitted with its prompt (adopting what the runtime retained), generated greedily,
  // and finished retaining its prompt and output. `explained`: the follow-up's explanation at admission.
  Answer answer(const std::vector<TokenId>& prompt, std::uint64_t id, Explanation* explained = nullptr) {
    Answer a;
    std::uint32_t reused = 0;
    const std::vector<std::int32_t> ids(prompt.begin(), prompt.end());  // the runtime's token type
    Result<AdmitResult> admitted = runtime_->open_context(id, kContext, ids, reused);
    EXPECT_TRUE(admitted.ok() && admitted->outcome == AdmitOutcome::admitted);
    if (!admitted.ok() || admitted->outcome != AdmitOutcome::admitted) return a;
    const ContextId c = admitted->handle;
    a.reused_tokens = reused;
    a.state_restored_tokens = runtime_->explain(c).state_restored_tokens;
    if (explained != nullptr) *explained = runtime_->explain(c);
    a.logits.assign(kOutput, std::vector<float>(engine_->config().vocab));
    a.tokens.reserve(kOutput);
    Sampler sampler(SamplerSettings{}, engine_->config().vocab);
    Recorder recorder{&a};
    GenerateRequest request;
    request.context = c;
    request.prompt = prompt;
    request.max_tokens = kOutput;
    request.on_token = record_token;
    request.on_logits = record_logits;
    request.user = &recorder;
    Result<GenerateStats> stats = generate(*engine_, sampler, request);
    EXPECT_TRUE(stats.ok()) << (stats.ok() ? "" : stats.error().describe());
    if (!stats.ok()) return a;
    EXPECT_EQ(stats->reused_tokens, reused);
    a.logits.resize(recorder.logits_seen);
    a.decode_allocations = testing::heap_allocations() - recorder.allocations_at_second;
    std::vector<std::int32_t> held(ids);
    held.insert(held.end(), a.tokens.begin(), a.tokens.end());
    runtime_->finish_retaining(c, held);
    return a;
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvRuntime> runtime_;
  std::unique_ptr<Engine> engine_;
};

void expect_same(const Answer& want, const Answer& got, const char* what) {
  ASSERT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  ASSERT_FALSE(want.logits.empty()) << what;
  for (std::size_t i = 0; i < want.logits.size(); ++i) {
    ASSERT_EQ(got.logits[i].size(), want.logits[i].size()) << what;
    EXPECT_EQ(std::memcmp(got.logits[i].data(), want.logits[i].data(), want.logits[i].size() * sizeof(float)), 0)
        << what << ": logits of output token " << i;
  }
}

class HybridReuse : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = ::testing::TempDir() + "hybrid_reuse.gguf";
    const std::string make = "python3 " ACTIVEKV_REFERENCE_DIR "/make_arch_model.py --arch qwen35 --mix q8 --out '" +
                             path_ + "'";
    rc_ = std::system(make.c_str());
  }
  void SetUp() override {
    if (WIFEXITED(rc_) && WEXITSTATUS(rc_) == 3) GTEST_SKIP() << "numpy or gguf missing: run scripts/install-deps.sh --test";
    ASSERT_EQ(rc_, 0) << "make_arch_model.py failed";
    Result<std::unique_ptr<Model>> m = Model::load(path_);
    ASSERT_TRUE(m.ok()) << m.error().describe();
    ASSERT_GT(m.value()->config().recurrent_layers, 0u);
    vocab_ = m.value()->config().vocab;
    first_ = sequence(kFirstPrompt, vocab_, 21);
  }

  // The follow-up `prompt` after the first request was retained, against the same prompt alone.
  void check(const std::vector<TokenId>& prompt, std::uint32_t want_reused, const char* what) {
    Rig reusing(path_);
    ASSERT_TRUE(reusing.ready());
    const Answer first = reusing.answer(first_, 1);
    ASSERT_EQ(first.reused_tokens, 0u);
    ASSERT_EQ(first.tokens.size(), kOutput);
    const Answer followed = reusing.answer(prompt, 2);
    EXPECT_EQ(followed.reused_tokens, want_reused) << what;
    EXPECT_EQ(followed.state_restored_tokens, want_reused) << what << ": explain names the checkpoint adopted";
    EXPECT_EQ(followed.decode_allocations, 0u) << what << ": decode steps after warm-up";
    if (want_reused > 0) {
      EXPECT_GT(reusing.runtime().counters().state_restores, 0u) << what;
    }

    Rig alone(path_);
    ASSERT_TRUE(alone.ready());
    const Answer fresh = alone.answer(prompt, 1);
    ASSERT_EQ(fresh.reused_tokens, 0u);
    expect_same(fresh, followed, what);
  }

  std::vector<TokenId> with_suffix(std::uint32_t shared, std::uint64_t seed, std::uint32_t n) const {
    std::vector<TokenId> p(first_.begin(), first_.begin() + shared);
    const std::vector<TokenId> tail = sequence(n, vocab_, seed);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  }

  static inline std::string path_;
  static inline int rc_ = 0;
  std::uint32_t vocab_ = 0;
  std::vector<TokenId> first_;
};

TEST_F(HybridReuse, FollowUpThroughTheNewestCheckpointEqualsNoReuse) {
  // The first conversation (prompt and output) then a new turn: the history's length is
  // 230 + 16 − 1 = 245 (the last output token was never fed), the newest page boundary 240.
  Rig probe(path_);
  ASSERT_TRUE(probe.ready());
  const Answer first = probe.answer(first_, 1);
  ASSERT_EQ(first.tokens.size(), kOutput);
  std::vector<TokenId> prompt(first_);
  prompt.insert(prompt.end(), first.tokens.begin(), first.tokens.end());
  const std::vector<TokenId> tail = sequence(30, vocab_, 31);
  prompt.insert(prompt.end(), tail.begin(), tail.end());
  check(prompt, 240, "the whole first conversation");
}

TEST_F(HybridReuse, FollowUpThroughThePromptCheckpointEqualsNoReuse) {
  // Match 229 (the prompt less its last token): the prompt's checkpoint at 224, which no K-page
  // checkpoint or decode step boundary gives (generate cut its prefill chunk there).
  check(with_suffix(kFirstPrompt, 41, 30), 224, "the first prompt");
}

TEST_F(HybridReuse, FollowUpBetweenCheckpointsRecomputesFromTheCheckpointBelow) {
  // Match 176 (11 pages): the checkpoints at or below are the K-page ones (64, 128): 128 adopted,
  // 128..180 recomputed.
  check(with_suffix(180, 51, 40), 128, "a match between checkpoints");
}

TEST_F(HybridReuse, PrefixShorterThanOnePageAdoptsNothingAndEqualsNoReuse) {
  check(with_suffix(10, 61, 60), 0, "a 10-token prefix");
}

// The host prefix cache carries the state too (docs/PREFIX_CACHE.md, "Recurrent state"): one
// history, so a stranger's request takes it and the first conversation's retained prefix goes. The
// cache kept the conversation's pages and its state checkpoints at 64, 128, 192, 224 and 240, so a
// follow-up adopts from the cache alone, up to the last page boundary with a cached state, and its
// logits and tokens equal no reuse by memcmp; the decode steps allocate nothing.
TEST_F(HybridReuse, FollowUpsAdoptFromTheHostPrefixCacheUpToACachedStateAndEqualNoReuse) {
  Rig probe(path_);
  ASSERT_TRUE(probe.ready());
  const Answer first = probe.answer(first_, 1);
  ASSERT_EQ(first.tokens.size(), kOutput);
  std::vector<TokenId> whole(first_);
  whole.insert(whole.end(), first.tokens.begin(), first.tokens.end());
  const std::vector<TokenId> tail = sequence(30, vocab_, 31);
  whole.insert(whole.end(), tail.begin(), tail.end());
  struct Case {
    std::vector<TokenId> prompt;
    std::uint32_t want_reused;
    std::uint32_t want_state_cut_pages;
    const char* what;
  };
  const Case cases[] = {
      {whole, 240, 0, "the whole first conversation: the cached state at 240"},
      {with_suffix(180, 51, 40), 128, 3, "a match of 176: cut to the cached state at 128"},
  };
  for (const Case& k : cases) {
    Rig reusing(path_, /*cache_states=*/16, /*max_seqs=*/1);
    ASSERT_TRUE(reusing.ready());
    const HostPoolPlan& host = reusing.runtime().plan().host;
    ASSERT_GE(host.prefix_cache_states, 16u);
    ASSERT_GT(host.prefix_cache_pages, 0u);
    ASSERT_EQ(reusing.runtime().counters().prefix_cache_pages_total, host.prefix_cache_pages) << "the cache is created";
    ASSERT_EQ(reusing.answer(first_, 1).reused_tokens, 0u);
    EXPECT_EQ(reusing.runtime().counters().prefix_cache_states_stored, 5u) << "checkpoints at 64, 128, 192, 224 and 240";
    EXPECT_EQ(reusing.runtime().counters().prefix_cache_states, 5u);
    const Answer stranger = reusing.answer(sequence(40, vocab_, 77), 2);  // takes the only history
    EXPECT_EQ(stranger.reused_tokens, 0u);
    EXPECT_EQ(reusing.runtime().counters().retained_dropped, 1u) << k.what;
    const std::uint64_t restores = reusing.runtime().counters().state_restores;
    Explanation e;
    const Answer followed = reusing.answer(k.prompt, 3, &e);
    EXPECT_EQ(followed.reused_tokens, k.want_reused) << k.what;
    EXPECT_EQ(followed.state_restored_tokens, k.want_reused) << k.what << ": the state restored from the cache's checkpoint";
    EXPECT_EQ(e.cache_pages_first, 0u) << k.what;
    EXPECT_EQ(e.cache_pages_end, k.want_reused / kPageTokens) << k.what << ": every page from the cache";
    EXPECT_EQ(e.cache_state_cut_pages, k.want_state_cut_pages) << k.what;
    EXPECT_EQ(reusing.runtime().counters().prefix_cache_state_cut_pages, k.want_state_cut_pages) << k.what;
    EXPECT_EQ(reusing.runtime().counters().state_restores, restores + 1) << k.what;
    if (k.want_state_cut_pages > 0) {
      EXPECT_NE(explanation_text(e).find("no cached recurrent-state checkpoint lies past the adopted boundary"),
                std::string::npos) << explanation_text(e);
      bool logged = false;
      const DecisionLog& log = reusing.runtime().decision_log();
      for (std::uint32_t i = 0; i < log.size(); ++i) logged = logged || log.at(i).reason == Reason::prefix_cache_state_cut;
      EXPECT_TRUE(logged) << k.what << ": the cut is in the decision log";
    }
    EXPECT_EQ(followed.decode_allocations, 0u) << k.what << ": decode steps after warm-up";
    EXPECT_EQ(reusing.runtime().counters().heap_allocations_in_steps, 0u) << k.what;
    EXPECT_EQ(reusing.runtime().check(), nullptr);

    Rig alone(path_);
    ASSERT_TRUE(alone.ready());
    const Answer fresh = alone.answer(k.prompt, 1);
    ASSERT_EQ(fresh.reused_tokens, 0u);
    expect_same(fresh, followed, k.what);
  }
}

}  // namespace
}  // namespace activekv::engine
