// window_invariance_test.cpp — a model with window layers (gemma3, random weights) gives the same
// bits however its tokens are budgeted on the device, with its window layers' host rings wrapping.
//
// The file (tests/reference/make_arch_model.py) has 6 layers, 5 of them window layers of
// kWindow = 32 tokens, so with 16-token pages each window layer keeps a host ring of
// (ceil(32 / 16) + 1) × 16 = 48 tokens (memory_plan.hpp): a 300-token sequence wraps it six times.
// One sequence is fed
//
//   - over the contiguous oracle (which keeps every row) in chunks of 32, and one token at a time;
//   - through the ActiveKV runtime with 100%, 25%, 10% and 5% of the history's pages on the
//     device, in chunks of 32, of 7, and one token at a time, alone and batched with a second context;
//
// and the logits at every position two runs both have are compared by memcmp (the runtime's runs
// among themselves; against the oracle to fp32 rounding, as runtime_engine_test.cpp says why). The runtime's
// host pool must be the ring formula's size, its steps must allocate nothing after warm-up, and
// explain must name the window layers and count only pages inside the window as staged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "engine/forward.hpp"
#include "engine/reference_kv_access.hpp"
#include "engine/runtime_kv.hpp"

namespace activekv::engine {
namespace {

constexpr std::uint32_t kLength = 300;
constexpr std::uint32_t kContext = 512;
constexpr std::uint32_t kPageTokens = 16;
constexpr std::uint32_t kWindow = 32;
constexpr std::uint32_t kRing = 48;  // (ceil(32 / 16) + 1) × 16
constexpr std::uint32_t kStepTokensMax = 48;

std::vector<TokenId> sequence(std::uint32_t n, std::uint32_t vocab, std::uint64_t seed) {
  std::vector<TokenId> out(n);
  std::uint64_t x = seed;
  for (std::uint32_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<TokenId>((x >> 33) % vocab);
  }
  return out;
}

std::vector<std::uint32_t> chunks_of(std::uint32_t size, std::uint32_t from = 0, std::uint32_t end = kLength) {
  std::vector<std::uint32_t> steps;
  for (std::uint32_t fed = from; fed < end; fed += std::min(size, end - fed)) steps.push_back(std::min(size, end - fed));
  return steps;
}

std::vector<std::int32_t> ids(const std::vector<TokenId>& tokens) {
  return std::vector<std::int32_t>(tokens.begin(), tokens.end());
}

using Logits = std::vector<std::vector<float>>;  // [position] (empty where no step ended there)

Logits feed(const Model& model, KvAccess& kv, ContextId a, std::optional<ContextId> other, ThreadPool& pool,
            const std::vector<TokenId>& tokens, const std::vector<TokenId>& other_tokens,
            const std::vector<std::uint32_t>& steps, std::uint32_t from = 0) {
  Forward f(model, kv, pool, best_isa(), ForwardLimits{kStepTokensMax + 5, 2, kContext});
  Logits run(kLength);
  std::uint32_t fed = from, other_fed = 0;
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
    run[fed - 1].assign(f.logits(0).begin(), f.logits(0).end());
  }
  return run;
}

// The runtime's kernel rescales in blocks of rows, the oracle row by row: the same to fp32 rounding.
void expect_close(const Logits& want, const Logits& got, const std::string& what) {
  std::uint32_t compared = 0;
  float worst = 0.0f;
  for (std::uint32_t p = 0; p < kLength; ++p) {
    if (want[p].empty() || got[p].empty()) continue;
    ++compared;
    for (std::size_t i = 0; i < want[p].size(); ++i) worst = std::max(worst, std::fabs(want[p][i] - got[p][i]));
  }
  EXPECT_GT(compared, 0u) << what;
  EXPECT_LE(worst, 5e-3f) << what << ": the largest logit difference";
}

void expect_same(const Logits& want, const Logits& got, const std::string& what) {
  std::uint32_t compared = 0;
  for (std::uint32_t p = 0; p < kLength; ++p) {
    if (want[p].empty() || got[p].empty()) continue;
    ++compared;
    EXPECT_EQ(std::memcmp(got[p].data(), want[p].data(), want[p].size() * sizeof(float)), 0)
        << what << ": logits at position " << p;
  }
  EXPECT_GT(compared, 0u) << what;
}

class WindowInvariance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = ::testing::TempDir() + "window_invariance.gguf";
    const std::string make = "python3 " ACTIVEKV_REFERENCE_DIR "/make_arch_model.py --arch gemma3 --mix q8 --window " +
                             std::to_string(kWindow) + " --context " + std::to_string(kContext) + " --out '" + path_ + "'";
    rc_ = std::system(make.c_str());
  }
  void SetUp() override {
    if (WIFEXITED(rc_) && WEXITSTATUS(rc_) == 3) GTEST_SKIP() << "numpy or gguf missing: run scripts/install-deps.sh --test";
    ASSERT_EQ(rc_, 0) << "make_arch_model.py failed";
    Result<std::unique_ptr<Model>> m = Model::load(path_);
    ASSERT_TRUE(m.ok()) << m.error().describe();
    model_ = std::move(m).value();
    ASSERT_EQ(model_->geometry().window_layers(), 5u);
    ASSERT_EQ(model_->geometry().kinds.window_tokens, kWindow);
    tokens_ = sequence(kLength, model_->config().vocab, 11);
    other_ = sequence(kLength, model_->config().vocab, 12);
  }

  Logits oracle_run(const std::vector<std::uint32_t>& steps) {
    ReferenceKvAccess kv(model_->geometry(), model_->config().q_heads, kPageTokens);
    const ContextId a = kv.open(kContext);
    return feed(*model_, kv, a, std::nullopt, pool_, tokens_, other_, steps);
  }

  struct Rig {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<KvRuntime> rt;
  };
  // A runtime (host backend, history staged through the tiles) with `fraction` of two contexts'
  // full-length pages on the device and a host pool of two ring-formula histories.
  Rig make_rig(const std::vector<std::uint32_t>& steps, double fraction, std::uint32_t contexts, bool reuse,
               std::uint64_t prefix_cache_bytes = 0) {
    const ForwardLimits limits{kStepTokensMax + 5, contexts, kContext};
    MemorySettings memory;
    memory.page_tokens = kPageTokens;
    memory.tile_tokens = 64;
    memory.tiles = 2;
    memory.max_context_tokens = kContext;
    memory.max_seqs = contexts;
    memory.chunk_tokens = std::max<std::uint32_t>(*std::max_element(steps.begin(), steps.end()), 5);
    KvRuntimeSettings settings = runtime_settings(*model_, memory, limits);
    settings.prefix_reuse = reuse;
    const Geometry& g = settings.memory.geometry;
    const auto aligned = [](std::uint64_t b) {
      return (b + arena_alignment_bytes - 1) / arena_alignment_bytes * arena_alignment_bytes;
    };
    settings.memory.host_pool_bytes = 2 * (std::uint64_t{kContext} * g.row_bytes() + 5ull * kRing * g.row_bytes());
    settings.memory.prefix_cache_bytes = prefix_cache_bytes;  // carved off the pool first
    settings.memory.host_pool_bytes += prefix_cache_bytes;
    const std::uint64_t pages_one = std::uint64_t{g.dense_layers} * (kContext / kPageTokens);
    const auto pages = static_cast<std::uint64_t>(std::ceil(static_cast<double>(2 * pages_one) * fraction));
    settings.memory.device_pool_bytes =
        aligned(std::uint64_t{memory.tiles} * memory.tile_tokens * g.row_bytes()) + aligned(pages * kPageTokens * g.row_bytes());
    Rig rig;
    Result<std::unique_ptr<Backend>> backend = make_backend("host", BackendOptions{});
    EXPECT_TRUE(backend.ok());
    if (!backend.ok()) return rig;
    rig.backend = std::move(backend).value();
    Result<std::unique_ptr<KvRuntime>> rt = KvRuntime::create(settings, *rig.backend);
    EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
    if (rt.ok()) rig.rt = std::move(rt).value();
    return rig;
  }

  // Through the runtime (host backend, history staged through the tiles) with `fraction` of
  // the two contexts' full-length pages on the device.
  Logits runtime_run(const std::vector<std::uint32_t>& steps, double fraction, bool batched) {
    const std::uint32_t contexts = batched ? 2 : 1;
    const ForwardLimits limits{kStepTokensMax + 5, contexts, kContext};
    MemorySettings memory;
    memory.page_tokens = kPageTokens;
    memory.tile_tokens = 64;
    memory.tiles = 2;
    memory.max_context_tokens = kContext;
    memory.max_seqs = contexts;
    memory.chunk_tokens = std::max<std::uint32_t>(*std::max_element(steps.begin(), steps.end()), 5);
    KvRuntimeSettings settings = runtime_settings(*model_, memory, limits);
    const Geometry& g = settings.memory.geometry;
    const auto aligned = [](std::uint64_t b) {
      return (b + arena_alignment_bytes - 1) / arena_alignment_bytes * arena_alignment_bytes;
    };
    // Two histories by the ring formula: 1 full layer × segment + 5 window layers × ring.
    const std::uint64_t history = std::uint64_t{kContext} * g.row_bytes() + 5ull * kRing * g.row_bytes();
    settings.memory.host_pool_bytes = 2 * history;
    const std::uint64_t pages_one = std::uint64_t{g.dense_layers} * (kContext / kPageTokens);
    const auto pages = static_cast<std::uint64_t>(std::ceil(static_cast<double>(2 * pages_one) * fraction));
    settings.memory.device_pool_bytes =
        aligned(std::uint64_t{memory.tiles} * memory.tile_tokens * g.row_bytes()) + aligned(pages * kPageTokens * g.row_bytes());
    Result<std::unique_ptr<Backend>> backend = make_backend("host", BackendOptions{});
    EXPECT_TRUE(backend.ok());
    if (!backend.ok()) return {};
    Result<std::unique_ptr<KvRuntime>> rt = KvRuntime::create(settings, **backend);
    EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
    if (!rt.ok()) return {};
    const HostPoolPlan& host = (*rt)->plan().host;
    EXPECT_EQ(host.ring_tokens, kRing);
    EXPECT_EQ(host.history_bytes, history);
    EXPECT_EQ(host.histories, 2u) << "the pool holds two histories by the ring formula";
    EXPECT_EQ(host.used_bytes, contexts * history) << "the rings are what is pinned";
    Result<AdmitResult> a = (*rt)->open_context(1, kContext);
    EXPECT_TRUE(a.ok() && a->outcome == AdmitOutcome::admitted);
    if (!a.ok()) return {};
    std::optional<ContextId> other;
    if (batched) {
      Result<AdmitResult> b = (*rt)->open_context(2, kContext);
      EXPECT_TRUE(b.ok() && b->outcome == AdmitOutcome::admitted);
      if (!b.ok()) return {};
      other = b->handle;
    }
    RuntimeKv kv(**rt);
    Logits out = feed(*model_, kv, a->handle, other, pool_, tokens_, other_, steps);
    const KvCounters& c = (*rt)->counters();
    if (fraction < 1.0) {
      EXPECT_GT(c.bytes_staged, 0u) << "a part of the pages on the device: history must be staged";
    }
    EXPECT_EQ(c.heap_allocations_in_steps, 0u) << "invariant 7";
    EXPECT_EQ(c.device_allocations_after_warmup, 0u);
    // A window layer's newest rows are in its ring, at slot t mod ring.
    const std::uint32_t length = (*rt)->length(a->handle);
    EXPECT_EQ(length, kLength);
    for (std::uint32_t t = length - kRing; t < length; ++t) {
      const std::span<const std::byte> row = (*rt)->host_row(a->handle, 0, t);
      EXPECT_EQ(static_cast<std::uint64_t>(row.data() - (*backend)->host_pool().data()),
                host.segment_offset(a->handle.slot, 0) + std::uint64_t{t % kRing} * g.row_bytes());
    }
    const Explanation e = (*rt)->explain(a->handle);
    EXPECT_EQ(e.window_layers, 5u);
    EXPECT_EQ(e.ring_tokens, kRing);
    // At most the window's pages per window layer and every page of the full layer are staged.
    EXPECT_LE(e.pages_staged_per_step, 5u * (kRing / kPageTokens) + (kLength + kPageTokens - 1) / kPageTokens);
    EXPECT_NE(explanation_text(e).find("window layers: 5"), std::string::npos);
    // On the device a window layer holds at most the sink and its ring's pages (1 + 48 / 16).
    std::vector<std::uint32_t> held(g.dense_layers, 0);
    for (const ResidentRun& run : e.runs) held[run.layer] += run.pages;
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      if (l % 6 < 5) {
        EXPECT_LE(held[l], 1u + kRing / kPageTokens) << "window layer " << l;
      }
    }
    if (fraction == 1.0) {
      EXPECT_EQ(held[5], (kLength + kPageTokens - 1) / kPageTokens) << "the full layer, all resident";
    }
    return out;
  }

  static inline std::string path_;
  static inline int rc_ = 0;
  std::unique_ptr<Model> model_;
  std::vector<TokenId> tokens_, other_;
  ThreadPool pool_{2};
};

TEST_F(WindowInvariance, OracleChunkingGivesTheSameBits) {
  expect_same(oracle_run(chunks_of(1)), oracle_run(chunks_of(32)), "oracle: one token at a time vs chunks of 32");
}

// Fractions are of two contexts' max-context pages (384): 25% and 10% hold two floors, 5% (19
// pages) one context's. At 100% nothing is staged, so the rings are never read; below it the
// window layers' pages come from their rings after they wrapped.
TEST_F(WindowInvariance, EveryDeviceBudgetGivesTheSameBits) {
  const Logits want = runtime_run(chunks_of(32), 1.0, false);
  expect_close(oracle_run(chunks_of(32)), want, "runtime 100% against the oracle");
  expect_same(want, runtime_run(chunks_of(32), 0.25, false), "runtime 25%, chunks of 32");
  expect_same(want, runtime_run(chunks_of(7), 0.05, false), "runtime 5%, chunks of 7");
  expect_same(want, runtime_run(chunks_of(1), 0.05, false), "runtime 5%, one token at a time");
  expect_same(want, runtime_run(chunks_of(1), 0.10, true), "runtime 10%, one token at a time, batched");
  expect_same(want, runtime_run(chunks_of(7), 0.25, true), "runtime 25%, chunks of 7, batched");
}

// Prefix reuse over rings: A (200 tokens) finishes retaining its 12 full pages. B = A + 100 more
// adopts them in place at token 192: the rings hold (160, 208], which covers the window of the
// query at 192. C shares only A's first 64 tokens: the window of its query at 64 lies in (32, 64],
// slots the rings have since rewritten, so C is prefilled from 0 (counted, logged). Both give the
// same logits as a runtime without reuse.
TEST_F(WindowInvariance, AFollowUpAdoptsItsRingsAndAnUncoveredMatchIsRecomputed) {
  const std::vector<TokenId> a_tokens(tokens_.begin(), tokens_.begin() + 200);
  std::vector<TokenId> c_tokens(tokens_.begin(), tokens_.begin() + 64);
  c_tokens.insert(c_tokens.end(), other_.begin(), other_.begin() + (kLength - 64));
  Rig plain = make_rig(chunks_of(32), 0.25, 2, false);
  Rig reuse = make_rig(chunks_of(32), 0.25, 2, true);
  ASSERT_TRUE(plain.rt && reuse.rt);
  const auto fresh = [&](const std::vector<TokenId>& prompt, std::uint64_t id) {
    Result<AdmitResult> r = plain.rt->open_context(id, kContext);
    EXPECT_TRUE(r.ok() && r->outcome == AdmitOutcome::admitted);
    RuntimeKv kv(*plain.rt);
    Logits out = feed(*model_, kv, r->handle, std::nullopt, pool_, prompt, other_, chunks_of(32));
    plain.rt->finish(r->handle);
    return out;
  };
  const Logits want_b = fresh(tokens_, 1);
  const Logits want_c = fresh(c_tokens, 2);

  // A, retained.
  std::uint32_t reused = 0;
  Result<AdmitResult> a = reuse.rt->open_context(10, kContext, ids(a_tokens), reused);
  ASSERT_TRUE(a.ok() && a->outcome == AdmitOutcome::admitted);
  ASSERT_EQ(reused, 0u);
  {
    RuntimeKv kv(*reuse.rt);
    feed(*model_, kv, a->handle, std::nullopt, pool_, a_tokens, other_, chunks_of(32, 0, 200));
  }
  reuse.rt->finish_retaining(a->handle, ids(a_tokens));

  // C first (a copy would need the retained history intact): its match is not covered.
  Result<AdmitResult> c = reuse.rt->open_context(12, kContext, ids(c_tokens), reused);
  ASSERT_TRUE(c.ok() && c->outcome == AdmitOutcome::admitted);
  EXPECT_EQ(reused, 0u) << "a match the rings no longer cover is recomputed";
  EXPECT_EQ(reuse.rt->counters().prefix_ring_recomputed, 1u);
  bool logged = false;
  const DecisionLog& log = reuse.rt->decision_log();
  for (std::uint32_t i = 0; i < log.size(); ++i) logged = logged || log.at(i).reason == Reason::ring_not_covering;
  EXPECT_TRUE(logged) << "the recompute is in the decision log";
  {
    RuntimeKv kv(*reuse.rt);
    expect_same(want_c, feed(*model_, kv, c->handle, std::nullopt, pool_, c_tokens, other_, chunks_of(32)),
                "C recomputed against no reuse");
  }
  reuse.rt->finish(c->handle);

  // B: the follow-up adopts at its last full page.
  Result<AdmitResult> b = reuse.rt->open_context(11, kContext, ids(tokens_), reused);
  ASSERT_TRUE(b.ok() && b->outcome == AdmitOutcome::admitted);
  EXPECT_EQ(reused, 192u) << "the follow-up adopts A's 12 full pages";
  EXPECT_EQ(reuse.rt->length(b->handle), reused);
  RuntimeKv kv(*reuse.rt);
  expect_same(want_b, feed(*model_, kv, b->handle, std::nullopt, pool_, tokens_, other_, chunks_of(32, reused), reused),
              "B adopted against no reuse");
  EXPECT_EQ(reuse.rt->counters().prefix_ring_recomputed, 1u);
  EXPECT_GT(reuse.rt->counters().bytes_staged, 0u);
}

// The host prefix cache over rings (docs/PREFIX_CACHE.md, "Window layers"): one context at a time,
// a 64-page cache. A (200 tokens) finishes; its rings held tokens 152..199, so its pages 10..11 are
// cached with the window layers' rows. A stranger then takes the only history (A's retained
// prefix goes), so B = A + 100 more finds its prefix in the cache alone: a query at 192 reads
// pages 10..11 of the window layers, cached, so B adopts 12 pages and the window rows land in its
// rings. C shares only A's first 64 tokens: the window rows of its pages 2..3 left A's rings before
// A was cached, so C's 4-page match is cut to nothing (counted, logged) and C is prefilled. Both
// give the same logits as a runtime without reuse, by memcmp; the steps allocate nothing.
TEST_F(WindowInvariance, APrefixLongerThanTheWindowComesFromTheHostPrefixCacheWithTheSameBits) {
  const std::vector<TokenId> a_tokens(tokens_.begin(), tokens_.begin() + 200);
  std::vector<TokenId> c_tokens(tokens_.begin(), tokens_.begin() + 64);
  c_tokens.insert(c_tokens.end(), other_.begin(), other_.begin() + (kLength - 64));
  Rig plain = make_rig(chunks_of(32), 0.25, 1, false);
  ASSERT_TRUE(plain.rt);
  const Geometry& g = model_->geometry();
  const std::uint64_t cache_page_bytes = std::uint64_t{kPageTokens} * g.row_bytes() * g.dense_layers;
  Rig reuse = make_rig(chunks_of(32), 0.25, 1, true, 64 * cache_page_bytes);
  ASSERT_TRUE(reuse.rt);
  ASSERT_EQ(reuse.rt->plan().host.prefix_cache_pages, 64u);
  ASSERT_EQ(reuse.rt->counters().prefix_cache_pages_total, 64u);
  const auto fresh = [&](const std::vector<TokenId>& prompt, std::uint64_t id) {
    Result<AdmitResult> r = plain.rt->open_context(id, kContext);
    EXPECT_TRUE(r.ok() && r->outcome == AdmitOutcome::admitted);
    RuntimeKv kv(*plain.rt);
    Logits out = feed(*model_, kv, r->handle, std::nullopt, pool_, prompt, other_, chunks_of(32));
    plain.rt->finish(r->handle);
    return out;
  };
  const Logits want_b = fresh(tokens_, 1);
  const Logits want_c = fresh(c_tokens, 2);

  std::uint32_t reused = 0;
  const auto run_finish = [&](const std::vector<TokenId>& prompt, std::uint64_t id, std::uint32_t end) {
    Result<AdmitResult> r = reuse.rt->open_context(id, kContext, ids(prompt), reused);
    EXPECT_TRUE(r.ok() && r->outcome == AdmitOutcome::admitted);
    EXPECT_EQ(reused, 0u);
    RuntimeKv kv(*reuse.rt);
    feed(*model_, kv, r->handle, std::nullopt, pool_, prompt, other_, chunks_of(32, 0, end));
    reuse.rt->finish_retaining(r->handle, std::vector<std::int32_t>(prompt.begin(), prompt.begin() + end));
  };
  run_finish(a_tokens, 10, 200);
  EXPECT_EQ(reuse.rt->counters().prefix_cache_pages, 12u);
  // Pages 0..9 of A: a window layer's ring no longer held them.
  EXPECT_EQ(reuse.rt->counters().prefix_cache_window_less_pages, 10u);
  run_finish(other_, 13, 100);  // the stranger: A's retained history gives way
  EXPECT_EQ(reuse.rt->counters().retained_dropped, 1u);

  // C: its match's window is not cached, so it is cut to nothing and prefilled.
  Result<AdmitResult> c = reuse.rt->open_context(12, kContext, ids(c_tokens), reused);
  ASSERT_TRUE(c.ok() && c->outcome == AdmitOutcome::admitted);
  EXPECT_EQ(reused, 0u) << "no cached window for a query at 64, 48, 32 or 16";
  EXPECT_EQ(reuse.rt->counters().prefix_cache_ring_cuts, 1u);
  EXPECT_EQ(reuse.rt->counters().prefix_cache_ring_cut_pages, 4u);
  bool logged = false;
  const DecisionLog& log = reuse.rt->decision_log();
  for (std::uint32_t i = 0; i < log.size(); ++i) logged = logged || log.at(i).reason == Reason::prefix_cache_ring_cut;
  EXPECT_TRUE(logged) << "the cut is in the decision log";
  {
    RuntimeKv kv(*reuse.rt);
    expect_same(want_c, feed(*model_, kv, c->handle, std::nullopt, pool_, c_tokens, other_, chunks_of(32)),
                "C after a cut against no reuse");
  }
  reuse.rt->finish(c->handle);

  // B: 12 pages from the cache.
  const std::uint64_t hits = reuse.rt->counters().prefix_cache_hits;
  Result<AdmitResult> b = reuse.rt->open_context(11, kContext, ids(tokens_), reused);
  ASSERT_TRUE(b.ok() && b->outcome == AdmitOutcome::admitted);
  EXPECT_EQ(reused, 192u) << "A's 12 full pages, from the cache";
  EXPECT_EQ(reuse.rt->counters().prefix_cache_hits, hits + 1);
  EXPECT_EQ(reuse.rt->counters().prefix_cache_ring_cuts, 1u) << "nothing cut this time";
  const Explanation e = reuse.rt->explain(b->handle);
  EXPECT_EQ(e.cache_pages_first, 0u);
  EXPECT_EQ(e.cache_pages_end, 12u);
  EXPECT_NE(explanation_text(e).find("into their host rings"), std::string::npos) << explanation_text(e);
  // The window layers' rows a query at 192 reads, (160, 192], sit at their ring slots.
  const HostPoolPlan& host = reuse.rt->plan().host;
  for (std::uint32_t t = 192 - kWindow; t < 192; ++t) {
    const std::span<const std::byte> row = reuse.rt->host_row(b->handle, 0, t);
    EXPECT_EQ(static_cast<std::uint64_t>(row.data() - reuse.backend->host_pool().data()),
              host.segment_offset(b->handle.slot, 0) + std::uint64_t{t % kRing} * g.row_bytes());
  }
  RuntimeKv kv(*reuse.rt);
  expect_same(want_b, feed(*model_, kv, b->handle, std::nullopt, pool_, tokens_, other_, chunks_of(32, reused), reused),
              "B adopted from the prefix cache against no reuse");
  EXPECT_EQ(reuse.rt->counters().heap_allocations_in_steps, 0u) << "invariant 7";
  EXPECT_EQ(reuse.rt->counters().device_allocations_after_warmup, 0u);
  EXPECT_GT(reuse.rt->counters().bytes_staged, 0u);
  reuse.rt->finish(b->handle);
}

TEST_F(WindowInvariance, ChunksLongerThanTheRingAreRefused) {
  const ForwardLimits limits{kStepTokensMax + 5, 2, kContext};
  MemorySettings memory;
  memory.page_tokens = kPageTokens;
  memory.max_context_tokens = kContext;
  memory.chunk_tokens = kRing + 1;
  KvRuntimeSettings settings = runtime_settings(*model_, memory, limits);
  settings.memory.host_pool_bytes = 1ull << 24;
  settings.memory.device_pool_bytes = 1ull << 22;
  Result<MemoryPlan> plan = make_memory_plan(settings.memory);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().describe().find("--chunk-tokens"), std::string::npos) << plan.error().describe();
}

}  // namespace
}  // namespace activekv::engine
