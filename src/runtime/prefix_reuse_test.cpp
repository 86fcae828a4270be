// prefix_reuse_test.cpp — retained histories, adoption, sharing and dropping in the KV runtime.
//
// The rows here are a function of the tokens before them, as a model's are:
// row(layer, t) = f(hash of tokens[0..t], layer). So a context that adopts a
// retained prefix must hold exactly the rows it would have written itself, and
// every check is against that: host rows (invariant 5) and attention outputs
// against the contiguous reference over the expected rows.
//
//   - PrefixIndex: chains, partial matches at page granularity, token confirmation, truncate/drop;
//   - a follow-up adopts its predecessor's history in place; a second request sharing the
//     prefix while the first runs copies it; histories taken by admission drop their prefix,
//     counted and logged; reuse off adopts nothing;
//   - a property test over thousands of seeds: random conversations (follow-ups, shared
//     system prefixes, strangers) through open / step / finish_retaining / finish / cancel
//     (between steps and mid-step), with check() (invariants 1 and 2, the index's own
//     consistency) after every operation, zero heap allocations in step calls and zero
//     device allocations (invariant 7), and every page and history back at the end.
//     ACTIVEKV_PREFIX_SEEDS sets the number of seeds (default 2000; 200 under sanitizers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "runtime/prefix_index.hpp"
#include "runtime/reference_kv.hpp"

namespace activekv {
namespace {

using runtime::PrefixIndex;
using runtime::PrefixIndexConfig;
using runtime::PrefixMatch;
using runtime::ReferenceKv;

constexpr float reference_tolerance = 2e-5f;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// ---- PrefixIndex ----------------------------------------------------------------

std::vector<std::int32_t> tokens_from(std::uint32_t n, std::uint64_t seed) {
  std::vector<std::int32_t> t(n);
  for (std::uint32_t i = 0; i < n; ++i) t[i] = static_cast<std::int32_t>(mix(seed * 1000 + i) % 50000);
  return t;
}

TEST(PrefixIndex, MatchesLeadingFullPagesOnly) {
  auto index = PrefixIndex::create(PrefixIndexConfig{4, 4, 16, 7});
  ASSERT_TRUE(index.ok());
  const std::vector<std::int32_t> a = tokens_from(30, 1);  // 7 full pages + 2 tokens
  index->retain(2, a, 1);
  EXPECT_EQ(index->pages(2), 7u);
  EXPECT_EQ(index->histories_held(), 1u);
  // A longer prompt with the same start matches every retained page.
  std::vector<std::int32_t> b = a;
  b.insert(b.end(), {1, 2, 3, 4, 5, 6});
  PrefixMatch m = index->longest(b, 100);
  EXPECT_EQ(m.slot, 2u);
  EXPECT_EQ(m.pages, 7u);
  // pages_max caps the match (the caller leaves a token to prefill).
  EXPECT_EQ(index->longest(b, 3).pages, 3u);
  // A divergence inside page 5 keeps pages 0..4.
  b[5 * 4 + 2] += 1;
  m = index->longest(b, 100);
  EXPECT_EQ(m.pages, 5u);
  // A divergence in page 0 matches nothing.
  b[0] += 1;
  EXPECT_EQ(index->longest(b, 100).pages, 0u);
  EXPECT_EQ(index->check(), nullptr);
}

TEST(PrefixIndex, AnotherModelIdentityNeverMatches) {
  auto x = PrefixIndex::create(PrefixIndexConfig{1, 4, 8, 1});
  auto y = PrefixIndex::create(PrefixIndexConfig{1, 4, 8, 2});
  const std::vector<std::int32_t> a = tokens_from(16, 3);
  x->retain(0, a, 1);
  y->retain(0, a, 1);
  EXPECT_EQ(x->longest(a, 8).pages, 4u);
  EXPECT_EQ(y->longest(a, 8).pages, 4u);
  EXPECT_EQ(x->check(), nullptr);
  EXPECT_EQ(y->check(), nullptr);
}

TEST(PrefixIndex, TruncateDropAndTheMostRecentOnTies) {
  auto index = PrefixIndex::create(PrefixIndexConfig{3, 2, 8, 0});
  const std::vector<std::int32_t> a = tokens_from(12, 5);
  index->retain(0, a, 1);
  index->retain(1, a, 2);
  EXPECT_EQ(index->longest(a, 8).slot, 1u) << "ties go to the most recently retained";
  index->truncate(1, 2);
  EXPECT_EQ(index->longest(a, 8).slot, 0u);
  EXPECT_EQ(index->longest(a, 8).pages, 6u);
  index->drop(0);
  EXPECT_EQ(index->longest(a, 8).slot, 1u);
  EXPECT_EQ(index->longest(a, 8).pages, 2u);
  index->truncate(1, 0);
  EXPECT_EQ(index->histories_held(), 0u);
  EXPECT_EQ(index->longest(a, 8).pages, 0u);
  EXPECT_FALSE(PrefixIndex::create(PrefixIndexConfig{0, 2, 8, 0}).ok());
  EXPECT_FALSE(PrefixIndex::create(PrefixIndexConfig{1, 0, 8, 0}).ok());
}

// ---- the runtime ---------------------------------------------------------------

// A small runtime: `histories` contexts of max_context tokens, every page resident or not as `pages` says.
struct Small {
  Geometry g;
  std::uint32_t q_heads = 2;
  std::uint32_t page_tokens = 4;
  std::uint32_t chunk_tokens = 8;
  std::uint32_t max_context = 64;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvRuntime> rt;
};

Small make_small(std::uint32_t histories, bool reuse, std::uint64_t seed = 1, std::uint32_t page_tokens = 4,
                 std::uint32_t tiles = 2, std::uint32_t extra_pages = 8, std::uint32_t layers = 2, bool device = true,
                 std::uint32_t pool_pages = 0, std::uint32_t retained_histories = 0,
                 ResidencyPolicyKind policy = ResidencyPolicyKind::exact, float hotness_threshold = 0.05f,
                 std::uint32_t cache_pages = 0, std::uint32_t window = 0) {
  Small s;
  s.g.dense_layers = layers;
  // With a window: every layer but each second one is a window layer of `window` tokens (a host ring).
  if (window != 0) s.g.kinds = LayerKinds::periodic(layers, 2, window);
  s.g.kv_heads = 1;
  s.g.head_dim = 8;
  s.g.dtype = DType::f16;
  s.page_tokens = page_tokens;
  s.chunk_tokens = 2 * page_tokens;
  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = s.g;
  m.page_tokens = page_tokens;
  m.tile_tokens = 2 * page_tokens;
  m.tiles = tiles;
  m.max_context_tokens = s.max_context;
  m.max_seqs = histories;
  m.chunk_tokens = s.chunk_tokens;
  m.retained_histories = retained_histories;  // host histories beyond the concurrency, for retained prefixes only
  m.host_pool_bytes = std::uint64_t{histories + retained_histories} * s.g.dense_layers * s.max_context * s.g.row_bytes();
  // A host prefix cache of cache_pages pages (one page index across every layer), carved off the pool.
  m.prefix_cache_bytes = std::uint64_t{cache_pages} * page_tokens * s.g.row_bytes() * s.g.dense_layers;
  m.host_pool_bytes += m.prefix_cache_bytes;
  const std::uint64_t floor_pages = std::uint64_t{s.g.dense_layers} * (1 + pages_spanned_max(m.chunk_tokens, page_tokens));
  const std::uint64_t pages = floor_pages * histories + extra_pages;
  m.device_pool_bytes = 4 * arena_alignment_bytes + std::uint64_t{m.tiles} * m.tile_tokens * s.g.row_bytes() +
                        pages * page_tokens * s.g.row_bytes();
  if (pool_pages != 0) {  // exactly pool_pages pool pages: one aligned tile region, then the pool
    m.device_pool_bytes = arena_alignment_bytes + std::uint64_t{pool_pages} * page_tokens * s.g.row_bytes();
  }
  settings.q_heads = s.q_heads;
  settings.prefix_reuse = reuse;
  settings.prefix_reuse_device = device;
  settings.policy = policy;
  settings.hotness_threshold = hotness_threshold;
  BackendOptions options;
  options.deterministic = true;
  options.seed = seed;
  auto backend = make_backend("host", options);
  EXPECT_TRUE(backend.ok());
  s.backend = std::move(backend).value();
  auto rt = KvRuntime::create(settings, *s.backend);
  EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
  if (rt.ok()) s.rt = std::move(rt).value();
  return s;
}

// A conversation's sequence and the rows a "model" writes for it: each row a function of the
// tokens up to and including its own.
struct Sequence {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint64_t> prefix_hash;  // hash of tokens[0..t]
  void push(std::int32_t t) {
    tokens.push_back(t);
    prefix_hash.push_back(mix((prefix_hash.empty() ? 0x1234 : prefix_hash.back()) ^ static_cast<std::uint32_t>(t)));
  }
};

void rows_of(const Sequence& s, std::uint32_t layer, std::uint32_t first, std::uint32_t n, std::size_t row_floats,
             std::vector<float>& k, std::vector<float>& v) {
  k.resize(n * row_floats);
  v.resize(n * row_floats);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t h = mix(s.prefix_hash[first + i] ^ (std::uint64_t{layer} << 40));
    for (std::size_t j = 0; j < row_floats; ++j) {
      const std::uint64_t x = mix(h + j);
      k[i * row_floats + j] = static_cast<float>(static_cast<std::int64_t>(x % 2001) - 1000) / 500.0f;
      v[i * row_floats + j] = static_cast<float>(static_cast<std::int64_t>((x >> 20) % 2001) - 1000) / 500.0f;
    }
  }
}

// One step feeding `n` tokens of `s` (from `first`) to `c`; rows also go to the reference, outputs compared.
void feed(Small& sm, ContextId c, const Sequence& s, std::uint32_t first, std::uint32_t n, ReferenceKv* ref = nullptr,
          std::uint32_t ref_context = 0, std::vector<float>* outputs = nullptr) {
  const std::size_t row_floats = std::size_t{sm.g.kv_heads} * sm.g.head_dim;
  const std::size_t qe = std::size_t{sm.q_heads} * sm.g.head_dim;
  const StepEntry e{c, n};
  ASSERT_TRUE(sm.rt->begin_step({&e, 1}).ok());
  std::vector<float> k, v, q(n * qe), out(n * qe), want(n * qe);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(mix(i + first * 77) % 1000) / 1000.0f - 0.5f;
  for (std::uint32_t l = 0; l < sm.g.dense_layers; ++l) {
    rows_of(s, l, first, n, row_floats, k, v);
    ASSERT_TRUE(sm.rt->write_kv(l, k.data(), v.data()).ok());
    ASSERT_TRUE(sm.rt->attend(l, q.data(), out.data()).ok());
    if (outputs != nullptr) outputs->insert(outputs->end(), out.begin(), out.end());
    if (ref != nullptr) {
      ref->append(ref_context, l, k.data(), v.data(), n);
      ref->attend(ref_context, l, q.data(), n, first, want.data());
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], reference_tolerance) << "layer " << l;
    }
  }
  ASSERT_TRUE(sm.rt->end_step().ok());
}

void prefill(Small& sm, ContextId c, const Sequence& s, std::uint32_t from, std::uint32_t to) {
  for (std::uint32_t at = from; at < to;) {
    const std::uint32_t n = std::min(sm.chunk_tokens, to - at);
    feed(sm, c, s, at, n);
    if (::testing::Test::HasFatalFailure()) return;
    at += n;
  }
}

// Every host row of c equals the row the model writes for s.
void expect_rows(Small& sm, ContextId c, const Sequence& s, std::uint32_t length, const char* what) {
  const std::size_t row_floats = std::size_t{sm.g.kv_heads} * sm.g.head_dim;
  ReferenceKv encoded(sm.g, sm.q_heads, sm.page_tokens);
  const std::uint32_t r = encoded.open();
  std::vector<float> k, v;
  for (std::uint32_t l = 0; l < sm.g.dense_layers; ++l) {
    rows_of(s, l, 0, length, row_floats, k, v);
    encoded.append(r, l, k.data(), v.data(), length);
    for (std::uint32_t t = 0; t < length; ++t) {
      ASSERT_EQ(std::memcmp(sm.rt->host_row(c, l, t).data(), encoded.encoded_row(r, l, t).data(), sm.g.row_bytes()), 0)
          << what << ": layer " << l << " token " << t;
    }
  }
}

Sequence sequence_of(std::uint32_t n, std::uint64_t seed) {
  Sequence s;
  for (std::uint32_t i = 0; i < n; ++i) s.push(static_cast<std::int32_t>(mix(seed * 7919 + i) % 30000));
  return s;
}

// Decisions of `kind` with `reason` in the explanation of c (the current step's decisions for its history).
std::uint32_t count_decisions(const KvRuntime& rt, ContextId c, DecisionKind kind, Reason reason) {
  std::uint32_t n = 0;
  for (const Decision& d : rt.explain(c).decisions) n += d.kind == kind && d.reason == reason ? 1u : 0u;
  return n;
}

TEST(PrefixReuse, AFollowUpAdoptsItsPredecessorsHistoryInPlace) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(2, true);
  ASSERT_NE(sm.rt, nullptr);
  Sequence turn = sequence_of(22, 1);  // 5 full pages + 2
  std::uint32_t reused = 99;
  auto a = sm.rt->open_context(1, 64, turn.tokens, reused);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reused, 0u);
  prefill(sm, a->handle, turn, 0, 22);
  sm.rt->finish_retaining(a->handle, turn.tokens);
  EXPECT_EQ(sm.rt->counters().retained_kept, 1u);
  EXPECT_EQ(sm.rt->counters().retained_histories, 1u);
  // Turn 2: turn 1 + 9 new tokens. 31 tokens: up to 7 full pages may be adopted, turn 1 holds 5.
  Sequence next = turn;
  for (std::int32_t t : sequence_of(9, 2).tokens) next.push(t);
  auto b = sm.rt->open_context(2, 64, next.tokens, reused);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(b->handle.slot, a->handle.slot) << "adopted in place";
  EXPECT_EQ(reused, 20u);
  EXPECT_EQ(sm.rt->length(b->handle), 20u);
  EXPECT_EQ(count_decisions(*sm.rt, b->handle, DecisionKind::adopt, Reason::prefix_adopted), 1u);
  expect_rows(sm, b->handle, next, 20, "adopted rows");
  prefill(sm, b->handle, next, 20, 31);
  expect_rows(sm, b->handle, next, 31, "after the suffix");
  const Explanation x = sm.rt->explain(b->handle);
  EXPECT_EQ(x.adopted_pages, 5u);
  EXPECT_FALSE(x.adopted_copied);
  EXPECT_EQ(x.adopted_from_request, 1u);
  EXPECT_NE(explanation_text(x).find("came from a retained prefix"), std::string::npos);
  EXPECT_EQ(sm.rt->counters().prefix_reused_tokens, 20u);
  EXPECT_EQ(sm.rt->counters().prefix_adoptions, 1u);
  EXPECT_EQ(sm.rt->check(), nullptr);
  sm.rt->finish(b->handle);
  EXPECT_EQ(sm.rt->counters().retained_histories, 0u) << "finish without retaining empties the history";
  EXPECT_EQ(sm.rt->pages_free(), sm.rt->pages_total());
  EXPECT_EQ(sm.rt->histories_free(), 2u);
}

TEST(PrefixReuse, AdoptedHistoryStreamsFromTheHostAndAttentionMatchesTheReference) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  // One tile, few spare pages, device retention off: the adopted history must be staged through the tiles.
  Small sm = make_small(1, true, 3, 4, 1, 0, 2, /*device=*/false);
  ASSERT_NE(sm.rt, nullptr);
  Sequence turn = sequence_of(40, 11);
  std::uint32_t reused = 0;
  auto a = sm.rt->open_context(1, 64, turn.tokens, reused);
  prefill(sm, a->handle, turn, 0, 40);
  sm.rt->finish_retaining(a->handle, turn.tokens);
  Sequence next = turn;
  for (std::int32_t t : sequence_of(6, 12).tokens) next.push(t);
  auto b = sm.rt->open_context(2, 64, next.tokens, reused);
  ASSERT_EQ(reused, 40u);
  ReferenceKv ref(sm.g, sm.q_heads, sm.page_tokens);
  const std::uint32_t r = ref.open();
  const std::size_t row_floats = std::size_t{sm.g.kv_heads} * sm.g.head_dim;
  std::vector<float> k, v;
  for (std::uint32_t l = 0; l < sm.g.dense_layers; ++l) {
    rows_of(next, l, 0, 40, row_floats, k, v);
    ref.append(r, l, k.data(), v.data(), 40);
  }
  const std::uint64_t staged_before = sm.rt->counters().bytes_staged;
  for (std::uint32_t t = 40; t < 46; ++t) {
    feed(sm, b->handle, next, t, 1, &ref, r);
    ASSERT_FALSE(HasFatalFailure());
  }
  EXPECT_GT(sm.rt->counters().bytes_staged, staged_before) << "the adopted history streams from the host";
  EXPECT_EQ(sm.rt->check(), nullptr);
  sm.rt->finish(b->handle);
}

// The same conversation with device retention off and on: turn 2's outputs byte for byte equal,
// the history handed over on the device instead of staged from the host.
struct TurnTwo {
  std::vector<float> outputs;
  std::uint64_t h2d_bytes = 0, bytes_staged = 0, device_adopted = 0;
  Explanation explanation;
  std::string text;
};

TurnTwo run_turn_two(bool device) {
  TurnTwo t;
  Small sm = make_small(1, true, 3, 4, 1, 24, 2, device);
  EXPECT_NE(sm.rt, nullptr);
  if (sm.rt == nullptr) return t;
  Sequence turn = sequence_of(40, 11);
  std::uint32_t reused = 0;
  auto a = sm.rt->open_context(1, 64, turn.tokens, reused);
  prefill(sm, a->handle, turn, 0, 40);
  sm.rt->finish_retaining(a->handle, turn.tokens);
  EXPECT_EQ(sm.rt->check(), nullptr);
  if (device) {
    EXPECT_GT(sm.rt->counters().retained_device_pages, 0u) << "the finished history's pages stay on the device";
    EXPECT_EQ(sm.rt->pages_free() + sm.rt->counters().retained_device_pages, sm.rt->pages_total())
        << "retained device pages are counted: free + held by the retained history = pool";
  } else {
    EXPECT_EQ(sm.rt->pages_free(), sm.rt->pages_total());
  }
  Sequence next = turn;
  for (std::int32_t x : sequence_of(6, 12).tokens) next.push(x);
  const std::uint64_t h2d_before = sm.rt->counters().h2d_bytes;
  const std::uint64_t staged_before = sm.rt->counters().bytes_staged;
  auto b = sm.rt->open_context(2, 64, next.tokens, reused);
  EXPECT_EQ(reused, 40u);
  EXPECT_EQ(b->handle.slot, a->handle.slot);
  t.explanation = sm.rt->explain(b->handle);
  t.text = explanation_text(t.explanation);
  if (device) {
    EXPECT_EQ(count_decisions(*sm.rt, b->handle, DecisionKind::adopt, Reason::device_pages_adopted), 1u)
        << "the hand-over is in the decision log";
  }
  ReferenceKv ref(sm.g, sm.q_heads, sm.page_tokens);
  const std::uint32_t r = ref.open();
  const std::size_t row_floats = std::size_t{sm.g.kv_heads} * sm.g.head_dim;
  std::vector<float> k, v;
  for (std::uint32_t l = 0; l < sm.g.dense_layers; ++l) {
    rows_of(next, l, 0, 40, row_floats, k, v);
    ref.append(r, l, k.data(), v.data(), 40);
  }
  for (std::uint32_t x = 40; x < 46; ++x) {
    feed(sm, b->handle, next, x, 1, &ref, r, &t.outputs);
    if (::testing::Test::HasFatalFailure()) return t;
  }
  expect_rows(sm, b->handle, next, 46, "turn 2");
  t.h2d_bytes = sm.rt->counters().h2d_bytes - h2d_before;
  t.bytes_staged = sm.rt->counters().bytes_staged - staged_before;
  t.device_adopted = sm.rt->counters().retained_device_pages_adopted;
  EXPECT_EQ(sm.rt->check(), nullptr);
  sm.rt->finish(b->handle);
  EXPECT_EQ(sm.rt->pages_free(), sm.rt->pages_total()) << "finish without retaining returns every page";
  EXPECT_EQ(sm.rt->counters().heap_allocations_in_steps, 0u);
  EXPECT_EQ(sm.rt->counters().device_allocations_after_warmup, 0u);
  return t;
}

TEST(PrefixReuseDevice, AFollowUpTakesOverTheRetainedDevicePagesWithIdenticalOutputs) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  const TurnTwo off = run_turn_two(false);
  ASSERT_FALSE(HasFatalFailure());
  const TurnTwo on = run_turn_two(true);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(on.outputs.size(), off.outputs.size());
  ASSERT_FALSE(on.outputs.empty());
  EXPECT_EQ(std::memcmp(on.outputs.data(), off.outputs.data(), on.outputs.size() * sizeof(float)), 0)
      << "outputs with device retention equal outputs without, byte for byte";
  EXPECT_EQ(off.device_adopted, 0u);
  EXPECT_EQ(off.explanation.adopted_device_pages, 0u);
  EXPECT_GT(on.device_adopted, 0u) << "pages handed over, counted";
  EXPECT_EQ(on.explanation.adopted_device_pages, on.device_adopted);
  EXPECT_LT(on.h2d_bytes, off.h2d_bytes) << "the follow-up copies fewer bytes host to device";
  EXPECT_LT(on.bytes_staged, off.bytes_staged);
  EXPECT_NE(on.text.find("device-resident retained prefix"), std::string::npos) << on.text;
  EXPECT_EQ(off.text.find("device-resident retained prefix"), std::string::npos);
  std::printf("turn 2: h2d %llu bytes with device retention, %llu without; staged %llu vs %llu; %llu pages handed over\n",
              static_cast<unsigned long long>(on.h2d_bytes), static_cast<unsigned long long>(off.h2d_bytes),
              static_cast<unsigned long long>(on.bytes_staged), static_cast<unsigned long long>(off.bytes_staged),
              static_cast<unsigned long long>(on.device_adopted));
}

TEST(PrefixReuseDevice, RetainedDevicePagesGiveWayFirstAndNeverBlockAdmission) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  // Two histories, few spare pages: a running stranger's growth takes the retained pages first.
  Small sm = make_small(2, true, 5, 4, 1, 8, 2, true, /*pool_pages=*/24);
  ASSERT_NE(sm.rt, nullptr);
  Sequence a = sequence_of(40, 71), stranger = sequence_of(60, 72);
  std::uint32_t reused = 0;
  auto ca = sm.rt->open_context(1, 64, a.tokens, reused);
  prefill(sm, ca->handle, a, 0, 40);
  sm.rt->finish_retaining(ca->handle, a.tokens);
  const std::uint64_t held = sm.rt->counters().retained_device_pages;
  ASSERT_GT(held, 0u);
  ASSERT_EQ(sm.rt->pages_total(), 24u);
  auto cs = sm.rt->open_context(2, 64, stranger.tokens, reused);
  ASSERT_EQ(cs->outcome, AdmitOutcome::admitted) << "retained device pages never make admission wait";
  EXPECT_NE(cs->handle.slot, ca->handle.slot);
  prefill(sm, cs->handle, stranger, 0, 60);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(sm.rt->check(), nullptr);
  EXPECT_GT(sm.rt->counters().retained_device_pages_reclaimed, 0u) << "the stranger's growth reclaimed them";
  EXPECT_LT(sm.rt->counters().retained_device_pages, held);
  EXPECT_EQ(sm.rt->counters().retained_histories, 1u) << "the host prefix stays: only device pages went";
  // a's follow-up still adopts its whole history; what left the device streams from the host, exact.
  Sequence f = a;
  for (std::int32_t x : sequence_of(3, 73).tokens) f.push(x);
  sm.rt->finish(cs->handle);
  auto cf = sm.rt->open_context(3, 64, f.tokens, reused);
  EXPECT_EQ(reused, 40u);
  EXPECT_EQ(sm.rt->explain(cf->handle).adopted_device_pages, sm.rt->counters().retained_device_pages_adopted);
  ReferenceKv ref(sm.g, sm.q_heads, sm.page_tokens);
  const std::uint32_t r = ref.open();
  const std::size_t row_floats = std::size_t{sm.g.kv_heads} * sm.g.head_dim;
  std::vector<float> k, v;
  for (std::uint32_t l = 0; l < sm.g.dense_layers; ++l) {
    rows_of(f, l, 0, 40, row_floats, k, v);
    ref.append(r, l, k.data(), v.data(), 40);
  }
  for (std::uint32_t x = 40; x < 43; ++x) {
    feed(sm, cf->handle, f, x, 1, &ref, r);
    ASSERT_FALSE(HasFatalFailure());
  }
  EXPECT_EQ(sm.rt->check(), nullptr);
  // Cancelling drops the prefix and its device pages with it.
  sm.rt->cancel(cf->handle);
  EXPECT_EQ(sm.rt->pages_free(), sm.rt->pages_total());
  EXPECT_EQ(sm.rt->counters().retained_device_pages, 0u);
  EXPECT_EQ(sm.rt->counters().retained_device_pages_kept,
            sm.rt->counters().retained_device_pages_adopted + sm.rt->counters().retained_device_pages_reclaimed);
}

TEST(PrefixReuse, TwoRequestsShareAPrefixByCopyingFromTheRunningOne) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(3, true);
  Sequence system = sequence_of(16, 21);  // a shared 4-page prefix
  std::uint32_t reused = 0;
  auto a = sm.rt->open_context(1, 64, system.tokens, reused);
  prefill(sm, a->handle, system, 0, 16);
  sm.rt->finish_retaining(a->handle, system.tokens);
  Sequence x = system, y = system;
  for (std::int32_t t : sequence_of(5, 22).tokens) x.push(t);
  for (std::int32_t t : sequence_of(7, 23).tokens) y.push(t);
  auto bx = sm.rt->open_context(2, 64, x.tokens, reused);
  EXPECT_EQ(reused, 16u);
  EXPECT_EQ(bx->handle.slot, a->handle.slot);
  auto by = sm.rt->open_context(3, 64, y.tokens, reused);
  EXPECT_EQ(reused, 16u) << "the second request copies the prefix the first one holds";
  EXPECT_NE(by->handle.slot, bx->handle.slot);
  EXPECT_EQ(sm.rt->counters().prefix_copies, 1u);
  EXPECT_TRUE(sm.rt->explain(by->handle).adopted_copied);
  prefill(sm, bx->handle, x, 16, 21);
  prefill(sm, by->handle, y, 16, 23);
  expect_rows(sm, bx->handle, x, 21, "in place");
  expect_rows(sm, by->handle, y, 23, "copied");
  EXPECT_EQ(sm.rt->check(), nullptr);
  sm.rt->finish_retaining(bx->handle, x.tokens);
  sm.rt->finish_retaining(by->handle, y.tokens);
  EXPECT_EQ(sm.rt->counters().retained_histories, 2u);
  EXPECT_EQ(sm.rt->histories_free(), 3u) << "retained histories are free histories";
}

TEST(PrefixReuse, AdmissionDropsTheLeastRecentlyUsedRetainedHistoryAndLogsIt) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(2, true);
  std::uint32_t reused = 0;
  Sequence s1 = sequence_of(12, 31), s2 = sequence_of(12, 32), s3 = sequence_of(12, 33);
  auto a = sm.rt->open_context(1, 64, s1.tokens, reused);
  prefill(sm, a->handle, s1, 0, 12);
  sm.rt->finish_retaining(a->handle, s1.tokens);
  auto b = sm.rt->open_context(2, 64, s2.tokens, reused);
  EXPECT_NE(b->handle.slot, a->handle.slot) << "a free history without a retained prefix is taken first";
  prefill(sm, b->handle, s2, 0, 12);
  sm.rt->finish_retaining(b->handle, s2.tokens);
  EXPECT_EQ(sm.rt->counters().retained_histories, 2u);
  // Both histories are retained; a stranger needs one: s1's (least recently used) gives way at once.
  auto c = sm.rt->open_context(3, 64, s3.tokens, reused);
  ASSERT_EQ(c->outcome, AdmitOutcome::admitted) << "retained histories never block admission";
  EXPECT_EQ(c->handle.slot, a->handle.slot);
  EXPECT_EQ(sm.rt->counters().retained_dropped, 1u);
  EXPECT_EQ(sm.rt->counters().retained_histories, 1u);
  EXPECT_EQ(count_decisions(*sm.rt, c->handle, DecisionKind::drop_retained, Reason::retained_lru), 1u)
      << "the decision log shows the drop and its reason";
  // s1's follow-up now finds nothing; s2's still adopts.
  Sequence f1 = s1, f2 = s2;
  f1.push(5);
  f2.push(5);
  auto d = sm.rt->open_context(4, 64, f2.tokens, reused);
  EXPECT_EQ(reused, 12u);
  EXPECT_EQ(d->handle.slot, b->handle.slot);
  EXPECT_EQ(sm.rt->check(), nullptr);
  sm.rt->finish(c->handle);
  sm.rt->finish(d->handle);
  auto e = sm.rt->open_context(5, 64, f1.tokens, reused);
  EXPECT_EQ(reused, 0u) << "a dropped prefix is gone";
  sm.rt->finish(e->handle);
}

// may_admit_now() also asks for room for the floor: 2 histories and a concurrency of 2, but an arena
// of one floor and a half. While one context runs a history is free and the concurrency has room,
// yet a request opened now would wait inside the runtime (floor_does_not_fit) and later be admitted
// from its queue adopting nothing; a caller that waits for may_admit_now() instead adopts.
TEST(PrefixReuse, MayAdmitNowWaitsForRoomForTheFloorSoAWaitingFollowUpStillAdopts) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(2, true, 1, 4, 1, 8, 2, true, /*pool_pages=*/12);
  ASSERT_NE(sm.rt, nullptr);
  KvRuntime& rt = *sm.rt;
  const std::uint64_t floor = rt.plan().budget.floor_pages;
  ASSERT_GE(rt.pages_total(), floor);
  ASSERT_LT(rt.pages_total(), 2 * floor) << "the arena holds one floor";
  EXPECT_EQ(rt.plan().host.concurrency, 2u);
  std::uint32_t reused = 0;
  Sequence s1 = sequence_of(12, 71), s2 = sequence_of(12, 72);
  auto a = rt.open_context(1, 64, s1.tokens, reused);
  ASSERT_EQ(a->outcome, AdmitOutcome::admitted);
  prefill(sm, a->handle, s1, 0, 12);
  rt.finish_retaining(a->handle, s1.tokens);
  auto b = rt.open_context(2, 64, s2.tokens, reused);
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_NE(b->handle.slot, a->handle.slot) << "the stranger takes the empty history";
  // s1's follow-up: a history is free (s1's own) and one context runs of two, but no floor fits.
  EXPECT_EQ(rt.histories_free(), 1u);
  EXPECT_EQ(rt.admission_wait(), Reason::floor_does_not_fit);
  EXPECT_FALSE(rt.may_admit_now()) << "a free history and room in the concurrency, but not in the arena";
  prefill(sm, b->handle, s2, 0, 12);
  rt.finish(b->handle);
  EXPECT_EQ(rt.admission_wait(), Reason::floor_fits);
  ASSERT_TRUE(rt.may_admit_now());
  Sequence f1 = s1;
  f1.push(9);
  auto c = rt.open_context(3, 64, f1.tokens, reused);
  ASSERT_EQ(c->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 12u) << "admitted when may_admit_now() said so, it adopts s1's history";
  expect_rows(sm, c->handle, f1, 12, "adopted after waiting for the floor");
  EXPECT_EQ(rt.check(), nullptr);
  rt.finish(c->handle);
  rt.release_retained();
  EXPECT_EQ(rt.pages_free(), rt.pages_total());
}

// The retained-history allowance: 2 running contexts, 1 extra history that only keeps a
// retained prefix. A follow-up keeps its history while two strangers run; a third stranger waits
// for the concurrency, not on a retained history; more conversations than histories still drop,
// least recently used first, counted and logged.
TEST(PrefixReuse, TheRetainedHistoryAllowanceKeepsAHistoryWhileTheConcurrencyRunsAndStillDrops) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(2, true, 1, 4, 2, 8, 2, true, 0, /*retained_histories=*/1);
  ASSERT_NE(sm.rt, nullptr);
  KvRuntime& rt = *sm.rt;
  EXPECT_EQ(rt.plan().host.concurrency, 2u);
  EXPECT_EQ(rt.plan().host.history_slots, 3u);
  EXPECT_EQ(rt.histories_free(), 3u);
  std::uint32_t reused = 0;
  Sequence s1 = sequence_of(12, 61), s2 = sequence_of(12, 62), s3 = sequence_of(12, 63), s4 = sequence_of(12, 64);
  auto a = rt.open_context(1, 64, s1.tokens, reused);
  prefill(sm, a->handle, s1, 0, 12);
  rt.finish_retaining(a->handle, s1.tokens);
  // Two strangers run (the concurrency); s1's history is kept in the extra one.
  auto b = rt.open_context(2, 64, s2.tokens, reused);
  auto c = rt.open_context(3, 64, s3.tokens, reused);
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  ASSERT_EQ(c->outcome, AdmitOutcome::admitted);
  EXPECT_NE(b->handle.slot, a->handle.slot);
  EXPECT_NE(c->handle.slot, a->handle.slot);
  EXPECT_EQ(rt.counters().retained_dropped, 0u) << "the allowance keeps s1's history while the concurrency runs";
  // A third stranger waits for the concurrency: the free history holds a retained prefix, but it is
  // not what admission waits on (the queue says no_free_history only because 2 run).
  auto d = rt.open_context(4, 64, s4.tokens, reused);
  ASSERT_EQ(d->outcome, AdmitOutcome::queued);
  EXPECT_EQ(d->reason, Reason::no_free_history);
  EXPECT_EQ(rt.histories_free(), 1u);
  EXPECT_FALSE(rt.may_admit_now()) << "a free history, but the concurrency runs";
  EXPECT_EQ(rt.counters().retained_histories, 1u) << "waiting does not drop the retained prefix";
  EXPECT_EQ(rt.check(), nullptr);
  prefill(sm, b->handle, s2, 0, 12);
  rt.finish_retaining(b->handle, s2.tokens);
  // The queued stranger is admitted at once; both free histories hold prefixes, so the least
  // recently used (s1's) is dropped, counted and logged.
  std::vector<AdmitResult> admitted(4);
  ASSERT_EQ(rt.take_admitted(admitted), 1u);
  const ContextId dh = admitted[0].handle;
  EXPECT_EQ(dh.slot, a->handle.slot);
  EXPECT_EQ(rt.counters().retained_dropped, 1u);
  EXPECT_EQ(count_decisions(rt, dh, DecisionKind::drop_retained, Reason::retained_lru), 1u)
      << "the decision log shows the drop and its reason";
  // s2's follow-up, once a running context finishes, adopts s2's history in place.
  Sequence f2 = s2;
  f2.push(9);
  rt.finish(c->handle);
  EXPECT_TRUE(rt.may_admit_now());
  auto e = rt.open_context(5, 64, f2.tokens, reused);
  ASSERT_EQ(e->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 12u);
  EXPECT_EQ(e->handle.slot, b->handle.slot) << "adopted in place";
  expect_rows(sm, e->handle, f2, 12, "adopted with the allowance");
  EXPECT_EQ(rt.check(), nullptr);
  rt.finish(dh);
  rt.finish(e->handle);
  rt.release_retained();
  EXPECT_EQ(rt.pages_free(), rt.pages_total());
  EXPECT_EQ(rt.histories_free(), 3u) << "free + running + retired = history_slots";
}

TEST(PrefixReuse, APartialMatchCopiesAndKeepsTheLongerHistory) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(2, true);
  std::uint32_t reused = 0;
  Sequence a = sequence_of(22, 51);  // 5 full pages retained
  auto ca = sm.rt->open_context(1, 64, a.tokens, reused);
  prefill(sm, ca->handle, a, 0, 22);
  sm.rt->finish_retaining(ca->handle, a.tokens);
  // b shares a's first 2 pages (a common preamble), then differs.
  Sequence b;
  for (std::uint32_t t = 0; t < 8; ++t) b.push(a.tokens[t]);
  for (std::int32_t t : sequence_of(9, 52).tokens) b.push(t);
  auto cb = sm.rt->open_context(2, 64, b.tokens, reused);
  EXPECT_EQ(reused, 8u);
  EXPECT_NE(cb->handle.slot, ca->handle.slot) << "a partial match does not cut the longer history";
  EXPECT_EQ(sm.rt->counters().prefix_copies, 1u);
  EXPECT_EQ(sm.rt->counters().retained_dropped, 0u);
  expect_rows(sm, cb->handle, b, 8, "copied preamble");
  // a's follow-up still adopts all of a, in place.
  Sequence f = a;
  f.push(7);
  auto cf = sm.rt->open_context(3, 64, f.tokens, reused);
  EXPECT_EQ(reused, 20u);
  EXPECT_EQ(cf->handle.slot, ca->handle.slot);
  sm.rt->finish(cb->handle);
  sm.rt->finish(cf->handle);
  EXPECT_EQ(sm.rt->check(), nullptr);
}

TEST(PrefixReuse, APartialMatchTakesTheOnlyFreeHistoryInPlaceAndCountsTheCut) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(1, true);
  std::uint32_t reused = 0;
  Sequence a = sequence_of(22, 61);
  auto ca = sm.rt->open_context(1, 64, a.tokens, reused);
  prefill(sm, ca->handle, a, 0, 22);
  sm.rt->finish_retaining(ca->handle, a.tokens);
  Sequence b;
  for (std::uint32_t t = 0; t < 8; ++t) b.push(a.tokens[t]);
  for (std::int32_t t : sequence_of(5, 62).tokens) b.push(t);
  auto cb = sm.rt->open_context(2, 64, b.tokens, reused);
  ASSERT_EQ(cb->outcome, AdmitOutcome::admitted) << "retained histories never block admission";
  EXPECT_EQ(reused, 8u);
  EXPECT_EQ(cb->handle.slot, ca->handle.slot);
  EXPECT_EQ(sm.rt->counters().retained_dropped, 1u) << "the 3 pages beyond the match are given up, counted";
  EXPECT_EQ(count_decisions(*sm.rt, cb->handle, DecisionKind::drop_retained, Reason::retained_lru), 1u);
  expect_rows(sm, cb->handle, b, 8, "in place");
  sm.rt->finish(cb->handle);
}

TEST(PrefixReuse, OffAdoptsNothing) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(2, false);
  Sequence s = sequence_of(20, 41);
  std::uint32_t reused = 0;
  auto a = sm.rt->open_context(1, 64, s.tokens, reused);
  prefill(sm, a->handle, s, 0, 20);
  sm.rt->finish_retaining(a->handle, s.tokens);
  s.push(1);
  auto b = sm.rt->open_context(2, 64, s.tokens, reused);
  EXPECT_EQ(reused, 0u);
  EXPECT_EQ(sm.rt->counters().retained_kept, 0u);
  sm.rt->finish(b->handle);
}

// ---- copy on adopt on the device, budget invariance, shutdown ---------------------

// Attention inputs for `s`'s rows [0, n) in a fresh reference context.
std::uint32_t reference_of(ReferenceKv& ref, const Small& sm, const Sequence& s, std::uint32_t n) {
  const std::uint32_t r = ref.open();
  const std::size_t row_floats = std::size_t{sm.g.kv_heads} * sm.g.head_dim;
  std::vector<float> k, v;
  for (std::uint32_t l = 0; l < sm.g.dense_layers; ++l) {
    rows_of(s, l, 0, n, row_floats, k, v);
    ref.append(r, l, k.data(), v.data(), n);
  }
  return r;
}

struct Conversation {
  std::vector<float> outputs;            // every attention output of the follow-up and the sharer, in order
  std::uint64_t h2d_bytes = 0, d2d_bytes = 0, staged_first_step = 0;
  std::uint64_t copied = 0, handed_over = 0;
  std::uint64_t admission_h2d = 0, admission_d2d = 0;
  std::uint64_t page_bytes = 0;
  Explanation sharer;
};

// Turn 1 (40 tokens) finishes retaining; its follow-up adopts it in place (device pages handed over
// when kept); while the follow-up runs, a second request sharing its first 24 tokens copies them
// (d2d from the follow-up's resident pages when device retention is on). pool_pages == 0: ample.
Conversation run_conversation(bool device, std::uint32_t pool_pages) {
  Conversation out;
  Small sm = make_small(2, true, 9, 4, 1, 48, 2, device, pool_pages);
  EXPECT_NE(sm.rt, nullptr);
  if (sm.rt == nullptr) return out;
  KvRuntime& rt = *sm.rt;
  out.page_bytes = rt.plan().arena.page_bytes;
  Sequence turn = sequence_of(40, 41);
  std::uint32_t reused = 0;
  auto a = rt.open_context(1, 64, turn.tokens, reused);
  prefill(sm, a->handle, turn, 0, 40);
  rt.finish_retaining(a->handle, turn.tokens);
  Sequence follow = turn, sharer;
  for (std::int32_t x : sequence_of(6, 42).tokens) follow.push(x);
  for (std::uint32_t t = 0; t < 24; ++t) sharer.push(turn.tokens[t]);
  for (std::int32_t x : sequence_of(5, 43).tokens) sharer.push(x);
  const std::uint64_t h2d0 = rt.counters().h2d_bytes, d2d0 = rt.counters().d2d_bytes;
  auto b = rt.open_context(2, 64, follow.tokens, reused);
  EXPECT_EQ(reused, 40u);
  ReferenceKv ref(sm.g, sm.q_heads, sm.page_tokens);
  const std::uint32_t rb = reference_of(ref, sm, follow, 40);
  feed(sm, b->handle, follow, 40, 1, &ref, rb, &out.outputs);
  if (::testing::Test::HasFatalFailure()) return out;
  const std::uint64_t h2d1 = rt.counters().h2d_bytes, d2d1 = rt.counters().d2d_bytes;
  auto c = rt.open_context(3, 64, sharer.tokens, reused);
  EXPECT_EQ(reused, 24u) << "the sharer copies the 6 pages it shares with the running follow-up";
  EXPECT_NE(c->handle.slot, b->handle.slot);
  out.admission_h2d = rt.counters().h2d_bytes - h2d1;
  out.admission_d2d = rt.counters().d2d_bytes - d2d1;
  out.sharer = rt.explain(c->handle);
  const std::uint64_t staged0 = rt.counters().bytes_staged;
  const std::uint32_t rc = reference_of(ref, sm, sharer, 24);
  feed(sm, c->handle, sharer, 24, 1, &ref, rc, &out.outputs);
  if (::testing::Test::HasFatalFailure()) return out;
  out.staged_first_step = rt.counters().bytes_staged - staged0;
  for (std::uint32_t x = 41; x < 46; ++x) {
    feed(sm, b->handle, follow, x, 1, &ref, rb, &out.outputs);
    feed(sm, c->handle, sharer, x - 16, 1, &ref, rc, &out.outputs);
    if (::testing::Test::HasFatalFailure()) return out;
    EXPECT_EQ(rt.check(), nullptr);
  }
  expect_rows(sm, b->handle, follow, 46, "follow-up");
  expect_rows(sm, c->handle, sharer, 30, "sharer");
  out.h2d_bytes = rt.counters().h2d_bytes - h2d0;
  out.d2d_bytes = rt.counters().d2d_bytes - d2d0;
  out.copied = rt.counters().prefix_device_pages_copied;
  out.handed_over = rt.counters().retained_device_pages_adopted;
  EXPECT_EQ(rt.counters().heap_allocations_in_steps, 0u);
  EXPECT_EQ(rt.counters().device_allocations_after_warmup, 0u);
  // Shutdown with retained device pages: both finish retaining, then release returns every page.
  rt.finish_retaining(b->handle, std::span<const std::int32_t>(follow.tokens).first(46));
  rt.finish_retaining(c->handle, std::span<const std::int32_t>(sharer.tokens).first(30));
  EXPECT_EQ(rt.check(), nullptr);
  if (device && pool_pages == 0) {
    EXPECT_GT(rt.counters().retained_device_pages, 0u) << "pages retained at the end";
  }
  rt.release_retained();
  EXPECT_EQ(rt.check(), nullptr);
  EXPECT_EQ(rt.pages_free(), rt.pages_total()) << "shutdown returns every page";
  EXPECT_EQ(rt.counters().retained_device_pages, 0u);
  EXPECT_EQ(rt.counters().retained_device_pages_kept,
            rt.counters().retained_device_pages_adopted + rt.counters().retained_device_pages_reclaimed);
  EXPECT_EQ(rt.counters().retained_histories, 2u) << "the host prefixes stay indexed";
  return out;
}

TEST(PrefixReuseDevice, CopyOnAdoptCopiesResidentPagesDeviceToDeviceNotHostToDevice) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  const Conversation off = run_conversation(false, 0);
  ASSERT_FALSE(HasFatalFailure());
  const Conversation on = run_conversation(true, 0);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(on.outputs.size(), off.outputs.size());
  EXPECT_EQ(std::memcmp(on.outputs.data(), off.outputs.data(), on.outputs.size() * sizeof(float)), 0)
      << "outputs with device retention equal outputs without, byte for byte";
  // 6 shared pages × 2 layers, all resident in the follow-up (handed over from turn 1): every one
  // copied d2d at admission, none h2d; the sharer's first step stages nothing of them.
  EXPECT_EQ(on.copied, 12u);
  EXPECT_EQ(on.admission_d2d, 12u * on.page_bytes) << "the copy on adopt is one d2d of the resident pages";
  EXPECT_EQ(on.admission_h2d, 0u);
  EXPECT_EQ(on.staged_first_step, 0u) << "the copied pages are read on the device, not staged from the host";
  EXPECT_EQ(off.copied, 0u);
  EXPECT_EQ(off.admission_d2d, 0u);
  EXPECT_GE(off.staged_first_step, 12u * off.page_bytes) << "without device retention the shared pages stream from the host";
  EXPECT_LT(on.h2d_bytes, off.h2d_bytes);
  EXPECT_EQ(on.sharer.adopted_device_copied, 12u);
  EXPECT_EQ(on.sharer.adopted_host_pages, 0u);
  EXPECT_EQ(off.sharer.adopted_host_pages, 12u);
  EXPECT_NE(explanation_text(on.sharer).find("copied device to device"), std::string::npos) << explanation_text(on.sharer);
  EXPECT_NE(explanation_text(off.sharer).find("adopted from the host"), std::string::npos);
  std::printf("follow-up + sharer: h2d %llu bytes with device retention, %llu without; d2d %llu vs %llu; "
              "%llu pages handed over, %llu copied d2d\n",
              static_cast<unsigned long long>(on.h2d_bytes), static_cast<unsigned long long>(off.h2d_bytes),
              static_cast<unsigned long long>(on.d2d_bytes), static_cast<unsigned long long>(off.d2d_bytes),
              static_cast<unsigned long long>(on.handed_over), static_cast<unsigned long long>(on.copied));
}

TEST(PrefixReuseDevice, OutputsAreBitIdenticalAtEveryDeviceBudgetWithDeviceRetention) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  // A context of 64 tokens is 16 pages per layer, 32 over 2 layers; two floors take 16 pages.
  // The pool holds both contexts whole (100%), a quarter of them (25%) or a twentieth (5%) beyond the floors.
  const std::uint32_t pools[3] = {16 + 64, 16 + 16, 16 + 3};
  const Conversation reference = run_conversation(false, pools[0]);
  ASSERT_FALSE(HasFatalFailure());
  for (const std::uint32_t pool : pools) {
    const Conversation on = run_conversation(true, pool);
    ASSERT_FALSE(HasFatalFailure()) << "pool " << pool;
    ASSERT_EQ(on.outputs.size(), reference.outputs.size());
    EXPECT_EQ(std::memcmp(on.outputs.data(), reference.outputs.data(), on.outputs.size() * sizeof(float)), 0)
        << "pool " << pool << " pages: outputs differ from the reference run";
    std::printf("pool %u pages: h2d %llu, d2d %llu, %llu handed over, %llu copied d2d\n", pool,
                static_cast<unsigned long long>(on.h2d_bytes), static_cast<unsigned long long>(on.d2d_bytes),
                static_cast<unsigned long long>(on.handed_over), static_cast<unsigned long long>(on.copied));
  }
}

// ---- the property test -----------------------------------------------------------

std::uint32_t seeds_from_environment() {
  const char* text = std::getenv("ACTIVEKV_PREFIX_SEEDS");
  const int n = text != nullptr ? std::atoi(text) : 0;
  // Sanitizer builds also walk every structure after every mutation (expensive asserts): fewer seeds
  // keep that stage quick; the release stage runs the full 2,000.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr std::uint32_t seeds_default = 200;
#else
  constexpr std::uint32_t seeds_default = 2000;
#endif
  return n > 0 ? static_cast<std::uint32_t>(n) : seeds_default;
}

// ---- the host prefix cache (docs/PREFIX.md, "The host prefix cache") -----------------------

// Every decision of `kind` with `reason` the runtime logged so far.
std::uint32_t count_logged(const KvRuntime& rt, DecisionKind kind, Reason reason) {
  std::uint32_t n = 0;
  const DecisionLog& log = rt.decision_log();
  for (std::uint32_t i = 0; i < log.size(); ++i) n += log.at(i).kind == kind && log.at(i).reason == reason ? 1u : 0u;
  return n;
}

// Feeds `s` from `from` to its end one chunk at a time, collecting every attention output.
std::vector<float> run_rest(Small& sm, ContextId c, const Sequence& s, std::uint32_t from) {
  std::vector<float> outputs;
  for (std::uint32_t at = from; at < s.tokens.size();) {
    const std::uint32_t n = std::min<std::uint32_t>(sm.chunk_tokens, static_cast<std::uint32_t>(s.tokens.size()) - at);
    feed(sm, c, s, at, n, nullptr, 0, &outputs);
    at += n;
  }
  return outputs;
}

TEST(PrefixCacheRuntime, ARepeatedPromptAdoptsFromTheCacheAfterItsHistoryWasTakenWithIdenticalOutputs) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  // One history and no retained allowance: a stranger takes the history and its retained prefix goes.
  Small sm = make_small(1, true, 1, 4, 2, 8, 2, true, 0, 0, ResidencyPolicyKind::exact, 0.05f, /*cache_pages=*/32);
  ASSERT_NE(sm.rt, nullptr);
  EXPECT_EQ(sm.rt->plan().host.prefix_cache_pages, 32u);
  EXPECT_EQ(sm.rt->counters().prefix_cache_pages_total, 32u);
  const Sequence prompt = sequence_of(22, 41);  // 5 full pages + 2
  std::uint32_t reused = 99;
  auto a = sm.rt->open_context(1, 64, prompt.tokens, reused);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reused, 0u);
  const std::vector<float> first = run_rest(sm, a->handle, prompt, 0);
  sm.rt->finish_retaining(a->handle, prompt.tokens);
  EXPECT_EQ(sm.rt->counters().prefix_cache_pages, 5u);
  EXPECT_EQ(sm.rt->counters().prefix_cache_bytes, 5u * 4 * sm.g.row_bytes() * sm.g.dense_layers);
  EXPECT_EQ(count_logged(*sm.rt, DecisionKind::retain, Reason::prefix_cached), 1u);
  const Sequence stranger = sequence_of(13, 42);
  auto b = sm.rt->open_context(2, 64, stranger.tokens, reused);
  ASSERT_EQ(b->handle.slot, a->handle.slot);
  EXPECT_EQ(reused, 0u);
  EXPECT_EQ(sm.rt->counters().retained_dropped, 1u) << "the stranger took the only history";
  run_rest(sm, b->handle, stranger, 0);
  sm.rt->finish_retaining(b->handle, stranger.tokens);
  // The same prompt again: its history is gone, the cache still holds its 5 full pages.
  auto c = sm.rt->open_context(3, 64, prompt.tokens, reused);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 20u);
  EXPECT_EQ(sm.rt->length(c->handle), 20u);
  expect_rows(sm, c->handle, prompt, 20, "rows copied from the prefix cache");
  EXPECT_EQ(sm.rt->counters().prefix_cache_hits, 1u);
  EXPECT_EQ(sm.rt->counters().prefix_cache_hit_tokens, 20u);
  EXPECT_EQ(sm.rt->counters().prefix_reused_tokens, 20u);
  EXPECT_EQ(count_decisions(*sm.rt, c->handle, DecisionKind::adopt, Reason::prefix_cache_adopted), 1u);
  const Explanation x = sm.rt->explain(c->handle);
  EXPECT_EQ(x.cache_pages_first, 0u);
  EXPECT_EQ(x.cache_pages_end, 5u);
  EXPECT_EQ(x.cache_shared_prefixes, 1u);
  EXPECT_NE(explanation_text(x).find("adopted from the prefix cache: pages 0..4 of every layer"), std::string::npos)
      << explanation_text(x);
  EXPECT_NE(explanation_text(x).find("page shared by 1 prefix(es)"), std::string::npos);
  // Its outputs equal, byte for byte, those of the same step over a history prefilled without reuse.
  const std::vector<float> again = run_rest(sm, c->handle, prompt, 20);
  Small off = make_small(1, false, 1, 4, 2, 8, 2, true);
  ASSERT_NE(off.rt, nullptr);
  auto d = off.rt->open_context(1, 64, prompt.tokens, reused);
  ASSERT_EQ(reused, 0u);
  prefill(off, d->handle, prompt, 0, 20);
  const std::vector<float> want = run_rest(off, d->handle, prompt, 20);
  ASSERT_EQ(want.size(), again.size());
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(std::memcmp(want.data(), again.data(), want.size() * sizeof(float)), 0) << "outputs after adopting from the cache";
  (void)first;
  off.rt->finish(d->handle);
  EXPECT_EQ(sm.rt->check(), nullptr);
  sm.rt->finish(c->handle);
  sm.rt->release_retained();
  EXPECT_EQ(sm.rt->pages_free(), sm.rt->pages_total());
}

// A repeated prompt's partial last page: the first pass's answer filled it, so the cache holds a
// page whose first rows are the prompt's last tokens. Adopted too, the prompt prefills one token
// (its logits), as llama-server's prompt cache does, not up to a page of them.
TEST(PrefixCacheRuntime, APromptsPartialLastPageComesFromAPageItsAnswerFilledWithIdenticalOutputs) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(1, true, 1, 4, 2, 8, 2, true, 0, 0, ResidencyPolicyKind::exact, 0.05f, /*cache_pages=*/32);
  ASSERT_NE(sm.rt, nullptr);
  const Sequence conversation = sequence_of(31, 41);  // a 23-token prompt (5 full pages + 3) and its answer
  Sequence prompt;
  for (std::uint32_t t = 0; t < 23; ++t) prompt.push(conversation.tokens[t]);
  std::uint32_t reused = 99;
  auto a = sm.rt->open_context(1, 64, prompt.tokens, reused);
  ASSERT_TRUE(a.ok());
  run_rest(sm, a->handle, conversation, 0);
  sm.rt->finish_retaining(a->handle, conversation.tokens);  // 31 rows: 7 full pages cached
  EXPECT_EQ(sm.rt->counters().prefix_cache_pages, 7u);
  const Sequence stranger = sequence_of(13, 42);
  auto b = sm.rt->open_context(2, 64, stranger.tokens, reused);
  ASSERT_EQ(b->handle.slot, a->handle.slot);
  run_rest(sm, b->handle, stranger, 0);
  sm.rt->finish_retaining(b->handle, stranger.tokens);
  // The prompt again: 5 full pages and the first 2 rows of page 5 from the cache, 1 token to feed.
  const std::uint64_t h2d_before = sm.rt->counters().h2d_bytes;
  auto c = sm.rt->open_context(3, 64, prompt.tokens, reused);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 22u);
  EXPECT_EQ(sm.rt->length(c->handle), 22u);
  expect_rows(sm, c->handle, prompt, 22, "rows copied from the prefix cache, the partial page's too");
  EXPECT_EQ(sm.rt->counters().prefix_cache_hit_tokens, 22u);
  EXPECT_EQ(sm.rt->counters().prefix_reused_tokens, 22u);
  EXPECT_EQ(sm.rt->counters().h2d_bytes - h2d_before, 2u * sm.g.row_bytes() * sm.g.dense_layers)
      << "the partial page goes to the device with its 2 rows, one page per layer";
  EXPECT_EQ(count_decisions(*sm.rt, c->handle, DecisionKind::adopt, Reason::prefix_cache_partial), 1u);
  const Explanation x = sm.rt->explain(c->handle);
  EXPECT_EQ(x.cache_pages_end, 5u);
  EXPECT_EQ(x.cache_partial_rows, 2u);
  EXPECT_NE(explanation_text(x).find("the first 2 row(s) of the partial page 5 of every layer"), std::string::npos)
      << explanation_text(x);
  EXPECT_EQ(sm.rt->check(), nullptr);
  // Its outputs equal, byte for byte, those of the same steps over a history prefilled without reuse.
  const std::vector<float> again = run_rest(sm, c->handle, conversation, 22);
  Small off = make_small(1, false, 1, 4, 2, 8, 2, true);
  ASSERT_NE(off.rt, nullptr);
  auto d = off.rt->open_context(1, 64, prompt.tokens, reused);
  ASSERT_EQ(reused, 0u);
  prefill(off, d->handle, conversation, 0, 22);
  const std::vector<float> want = run_rest(off, d->handle, conversation, 22);
  ASSERT_EQ(want.size(), again.size());
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(std::memcmp(want.data(), again.data(), want.size() * sizeof(float)), 0) << "outputs after the partial page";
  off.rt->finish(d->handle);
  EXPECT_EQ(sm.rt->check(), nullptr);
  sm.rt->finish(c->handle);
  sm.rt->release_retained();
  EXPECT_EQ(sm.rt->pages_free(), sm.rt->pages_total());
}

TEST(PrefixCacheRuntime, ASharedSystemPromptIsStoredOnceEvictionIsLoggedAndNeverBlocksAdmission) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  // 10 cache pages: a 3-page system prompt + 2-page questions; five of them do not fit.
  Small sm = make_small(1, true, 1, 4, 2, 8, 2, true, 0, 0, ResidencyPolicyKind::exact, 0.05f, /*cache_pages=*/10);
  ASSERT_NE(sm.rt, nullptr);
  const Sequence system = sequence_of(12, 50);
  std::vector<Sequence> prompts;
  for (std::uint64_t i = 0; i < 5; ++i) {
    Sequence s = system;
    for (std::int32_t t : sequence_of(9, 60 + i).tokens) s.push(t);  // 21 tokens: 5 full pages
    prompts.push_back(s);
  }
  std::uint32_t reused = 0;
  std::uint64_t id = 1;
  for (const Sequence& s : prompts) {
    auto r = sm.rt->open_context(id++, 64, s.tokens, reused);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->outcome, AdmitOutcome::admitted) << "the cache never blocks admission";
    EXPECT_EQ(reused % 4, 0u);
    EXPECT_GE(reused, id > 2 ? 12u : 0u) << "the system prompt's pages are reused from the second prompt on";
    expect_rows(sm, r->handle, s, reused, "adopted");
    run_rest(sm, r->handle, s, reused);
    sm.rt->finish_retaining(r->handle, s.tokens);
    ASSERT_EQ(sm.rt->check(), nullptr);
  }
  const KvCounters& c = sm.rt->counters();
  EXPECT_EQ(c.prefix_cache_pages_shared, 4u * 3) << "the stem is stored once, found by the four others";
  EXPECT_EQ(c.prefix_cache_pages_stored, 3u + 5 * 2);
  EXPECT_EQ(c.prefix_cache_evictions, 3u) << "13 pages offered to 10";
  EXPECT_EQ(c.prefix_cache_pages, 10u);
  EXPECT_GE(count_logged(*sm.rt, DecisionKind::evict, Reason::prefix_cache_lru), 1u);
  // The newest prompt is whole; the oldest lost its question but still finds the system prompt.
  auto last = sm.rt->open_context(id++, 64, prompts[4].tokens, reused);
  EXPECT_EQ(reused, 20u);
  const Explanation x = sm.rt->explain(last->handle);
  sm.rt->finish(last->handle);
  auto oldest = sm.rt->open_context(id++, 64, prompts[0].tokens, reused);
  EXPECT_EQ(reused, 12u) << "the stem outlived its branch";
  const Explanation y = sm.rt->explain(oldest->handle);
  EXPECT_EQ(y.cache_shared_prefixes, 4u) << "the system prompt's first page is shared by the four prefixes left";
  EXPECT_NE(explanation_text(y).find("page shared by 4 prefix(es)"), std::string::npos) << explanation_text(y);
  (void)x;
  sm.rt->finish(oldest->handle);
  EXPECT_EQ(sm.rt->check(), nullptr);
}

TEST(PrefixCacheRuntime, AShorterCopyFromARunningContextGivesWayToTheWholePrefixInTheCache) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Small sm = make_small(2, true, 1, 4, 2, 8, 2, true, 0, 0, ResidencyPolicyKind::exact, 0.05f, /*cache_pages=*/32);
  ASSERT_NE(sm.rt, nullptr);
  const Sequence stem = sequence_of(8, 70);  // a 2-page template every prompt starts with
  auto with_stem = [&](std::uint64_t seed, std::uint32_t n) {
    Sequence s = stem;
    for (std::int32_t t : sequence_of(n, seed).tokens) s.push(t);
    return s;
  };
  const Sequence y = with_stem(71, 15);  // 23 tokens: 5 full pages
  const Sequence z = with_stem(72, 9);
  const Sequence w = sequence_of(10, 73);
  std::uint32_t reused = 0;
  auto a = sm.rt->open_context(1, 64, y.tokens, reused);
  run_rest(sm, a->handle, y, 0);
  sm.rt->finish_retaining(a->handle, y.tokens);  // y: retained and cached
  auto b = sm.rt->open_context(2, 64, w.tokens, reused);  // a stranger in the other history
  run_rest(sm, b->handle, w, 0);
  auto c = sm.rt->open_context(3, 64, z.tokens, reused);  // the only free history: y's, cut to the stem
  ASSERT_EQ(c->handle.slot, a->handle.slot);
  EXPECT_EQ(reused, 8u);
  run_rest(sm, c->handle, z, 8);
  sm.rt->finish(b->handle);
  // y again: the running z holds its 2-page stem, the cache all 5 pages. The cache wins.
  auto d = sm.rt->open_context(4, 64, y.tokens, reused);
  ASSERT_EQ(d->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 20u) << "the whole prefix from the cache, not the stem copied from the running context";
  expect_rows(sm, d->handle, y, 20, "rows from the cache");
  const Explanation x = sm.rt->explain(d->handle);
  EXPECT_EQ(x.cache_pages_first, 0u);
  EXPECT_EQ(x.cache_pages_end, 5u);
  EXPECT_EQ(x.cache_shared_prefixes, 1u);
  EXPECT_EQ(sm.rt->check(), nullptr);
  sm.rt->finish(c->handle);
  sm.rt->finish(d->handle);
  sm.rt->release_retained();
  EXPECT_EQ(sm.rt->pages_free(), sm.rt->pages_total());
}

// ---- window layers in the host prefix cache (docs/PREFIX_CACHE.md, "Window layers") ----------

// Layer 0 is a window layer of 8 tokens (a host ring of (2 + 1) × 4 = 12 rows), layer 1 a full one.
// X1 (16 tokens) finishes: its ring held tokens 4..15, so pages 1..3 are cached with their window
// rows, page 0 without. X2 (40 tokens, X1's follow-up) finishes: it shares pages 0..3 (page 0's
// window rows are gone from its ring too) and stores 4..9, of which only 7..9 still had theirs. A
// prompt Y sharing X2's first 24 tokens matches 6 pages; a query at 24 reads pages 4..5, whose
// window rows are not cached, nor are 3..4 for a query at 20; at 16 it reads pages 2..3, cached: the
// adoption is cut back to 4 pages (2 cut, counted, logged, explained). The window rows of pages 2..3
// land in the ring at slot t mod 12, and the outputs equal a run without reuse byte for byte.
TEST(PrefixCacheRuntime, WindowLayersAdoptOnlyWhereTheCacheHoldsTheWindowIntoTheirRings) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  constexpr std::uint32_t window = 8, ring = 12;
  Small sm = make_small(1, true, 1, 4, 2, 8, 2, true, 0, 0, ResidencyPolicyKind::exact, 0.05f, /*cache_pages=*/32, window);
  ASSERT_NE(sm.rt, nullptr);
  const HostPoolPlan& host = sm.rt->plan().host;
  ASSERT_EQ(host.window_layers, 1u);
  ASSERT_EQ(host.ring_tokens, ring);
  EXPECT_EQ(host.prefix_cache_pages, 32u) << "window layers no longer refuse a prefix cache";
  const Sequence x = sequence_of(40, 81);
  Sequence x1;
  for (std::uint32_t t = 0; t < 16; ++t) x1.push(x.tokens[t]);
  std::uint32_t reused = 99;
  auto a = sm.rt->open_context(1, 64, x1.tokens, reused);
  ASSERT_TRUE(a.ok());
  run_rest(sm, a->handle, x1, 0);
  sm.rt->finish_retaining(a->handle, x1.tokens);
  EXPECT_EQ(sm.rt->counters().prefix_cache_pages, 4u);
  EXPECT_EQ(sm.rt->counters().prefix_cache_window_less_pages, 1u) << "page 0 had left the ring";
  auto b = sm.rt->open_context(2, 64, x.tokens, reused);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reused, 16u) << "the follow-up adopts X1 in place (its ring covers the window at 16)";
  run_rest(sm, b->handle, x, reused);
  sm.rt->finish_retaining(b->handle, x.tokens);
  EXPECT_EQ(sm.rt->counters().prefix_cache_pages, 10u);
  EXPECT_EQ(sm.rt->counters().prefix_cache_window_less_pages, 1u + 1 + 3) << "page 0 again, pages 4..6 new";

  Sequence y;
  for (std::uint32_t t = 0; t < 24; ++t) y.push(x.tokens[t]);
  for (std::int32_t t : sequence_of(14, 82).tokens) y.push(t);
  auto c = sm.rt->open_context(3, 64, y.tokens, reused);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 16u) << "cut back to the longest prefix whose window the cache holds";
  EXPECT_EQ(sm.rt->length(c->handle), 16u);
  EXPECT_EQ(sm.rt->counters().prefix_ring_recomputed, 1u) << "X2's retained history does not cover Y's window";
  EXPECT_EQ(sm.rt->counters().prefix_cache_ring_cuts, 1u);
  EXPECT_EQ(sm.rt->counters().prefix_cache_ring_cut_pages, 2u);
  EXPECT_EQ(sm.rt->counters().prefix_cache_hit_tokens, 16u);
  EXPECT_EQ(count_decisions(*sm.rt, c->handle, DecisionKind::adopt, Reason::prefix_cache_ring_cut), 1u);
  EXPECT_EQ(count_decisions(*sm.rt, c->handle, DecisionKind::adopt, Reason::prefix_cache_adopted), 1u);
  const Explanation e = sm.rt->explain(c->handle);
  EXPECT_EQ(e.cache_pages_end, 4u);
  EXPECT_EQ(e.cache_ring_cut_pages, 2u);
  const std::string text = explanation_text(e);
  EXPECT_NE(text.find("prefix cache: 2 more matched page(s) not adopted"), std::string::npos) << text;
  EXPECT_NE(text.find("into their host rings (token t at slot t mod 12)"), std::string::npos) << text;
  EXPECT_NE(std::string(reason_text(Reason::prefix_cache_ring_cut)).find("cut back"), std::string::npos);
  // Ring placement: the full layer holds every row, the window layer the rows of pages 2..3 (what a
  // query at 16 reads), each at its ring slot.
  const std::size_t row_floats = std::size_t{sm.g.kv_heads} * sm.g.head_dim;
  ReferenceKv encoded(sm.g, sm.q_heads, sm.page_tokens);
  const std::uint32_t r = encoded.open();
  std::vector<float> k, v;
  for (std::uint32_t l = 0; l < sm.g.dense_layers; ++l) {
    rows_of(y, l, 0, 16, row_floats, k, v);
    encoded.append(r, l, k.data(), v.data(), 16);
    for (std::uint32_t t = l == 0 ? 16 - window : 0; t < 16; ++t) {
      const std::span<const std::byte> row = sm.rt->host_row(c->handle, l, t);
      ASSERT_EQ(std::memcmp(row.data(), encoded.encoded_row(r, l, t).data(), sm.g.row_bytes()), 0) << "layer " << l << " token " << t;
      const std::uint64_t slot_token = l == 0 ? t % ring : t;
      EXPECT_EQ(static_cast<std::uint64_t>(row.data() - sm.backend->host_pool().data()),
                host.segment_offset(c->handle.slot, l) + slot_token * sm.g.row_bytes());
    }
  }
  EXPECT_EQ(sm.rt->check(), nullptr);
  const std::vector<float> again = run_rest(sm, c->handle, y, 16);
  Small off = make_small(1, false, 1, 4, 2, 8, 2, true, 0, 0, ResidencyPolicyKind::exact, 0.05f, 0, window);
  ASSERT_NE(off.rt, nullptr);
  auto d = off.rt->open_context(1, 64, y.tokens, reused);
  ASSERT_EQ(reused, 0u);
  prefill(off, d->handle, y, 0, 16);
  const std::vector<float> want = run_rest(off, d->handle, y, 16);
  ASSERT_EQ(want.size(), again.size());
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(std::memcmp(want.data(), again.data(), want.size() * sizeof(float)), 0) << "outputs after a cut adoption";
  off.rt->finish(d->handle);
  EXPECT_EQ(sm.rt->counters().heap_allocations_in_steps, 0u);
  sm.rt->finish_retaining(c->handle, y.tokens);
  // X2 again, past the window: pages 7..9 hold the window of a query at 40 (it reads 8..9), so the
  // whole 10-page prefix comes from the cache, nothing cut.
  Sequence x3 = x;
  for (std::int32_t t : sequence_of(6, 83).tokens) x3.push(t);
  const std::uint64_t cuts = sm.rt->counters().prefix_cache_ring_cuts;
  auto f = sm.rt->open_context(4, 64, x3.tokens, reused);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(reused, 40u);
  EXPECT_EQ(sm.rt->counters().prefix_cache_ring_cuts, cuts);
  EXPECT_EQ(sm.rt->explain(f->handle).cache_pages_end, 10u);
  const std::vector<float> tail = run_rest(sm, f->handle, x3, 40);
  Small off2 = make_small(1, false, 1, 4, 2, 8, 2, true, 0, 0, ResidencyPolicyKind::exact, 0.05f, 0, window);
  auto g = off2.rt->open_context(1, 64, x3.tokens, reused);
  prefill(off2, g->handle, x3, 0, 40);
  const std::vector<float> want_tail = run_rest(off2, g->handle, x3, 40);
  ASSERT_EQ(want_tail.size(), tail.size());
  EXPECT_EQ(std::memcmp(want_tail.data(), tail.data(), tail.size() * sizeof(float)), 0) << "outputs after a whole adoption";
  off2.rt->finish(g->handle);
  EXPECT_EQ(sm.rt->check(), nullptr);
  sm.rt->finish(f->handle);
  sm.rt->release_retained();
  EXPECT_EQ(sm.rt->pages_free(), sm.rt->pages_total());
}

// Random prompts over shared stems through one history, a window layer (8 tokens, ring 12) and a
// small cache: every adoption (retained in place, from the cache, cut or not, with a partial page or
// not) gives the outputs a runtime without reuse gives, byte for byte; check() after every request,
// no allocation in steps, every page back at the end.
TEST(PrefixCacheRuntime, WindowLayersRandomPromptsOverSharedStemsEqualNoReuse) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  constexpr std::uint32_t window = 8;
  std::uint64_t adopted = 0, cut = 0, requests = 0, hits = 0, partial = 0;
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const std::uint32_t cache_pages = 4 + static_cast<std::uint32_t>(rng() % 24);
    Small sm = make_small(1, true, seed, 4, 2, 8, 2, true, 0, 0, ResidencyPolicyKind::exact, 0.05f, cache_pages, window);
    ASSERT_NE(sm.rt, nullptr);
    const Sequence stem = sequence_of(48, 900 + seed % 3);
    for (std::uint32_t r = 0; r < 6; ++r) {
      Sequence s;
      const std::uint32_t shared = static_cast<std::uint32_t>(rng() % 49);
      for (std::uint32_t t = 0; t < shared; ++t) s.push(stem.tokens[t]);
      const std::uint32_t total = std::max<std::uint32_t>(shared + 1 + static_cast<std::uint32_t>(rng() % 14), 6);
      for (std::int32_t t : sequence_of(total - shared, seed * 100 + r).tokens) s.push(t);
      const std::uint32_t prompt = std::max<std::uint32_t>(2, total - static_cast<std::uint32_t>(rng() % 6));
      const std::vector<std::int32_t> prompt_tokens(s.tokens.begin(), s.tokens.begin() + prompt);
      std::uint32_t reused = 0;
      auto c = sm.rt->open_context(r + 1, 64, prompt_tokens, reused);
      ASSERT_TRUE(c.ok());
      ASSERT_EQ(c->outcome, AdmitOutcome::admitted);
      ASSERT_LT(reused, prompt) << "at least one prompt token is fed";
      adopted += reused > 0 ? 1 : 0;
      const std::vector<float> got = run_rest(sm, c->handle, s, reused);
      ASSERT_FALSE(HasFatalFailure());
      Small off = make_small(1, false, seed, 4, 2, 8, 2, true, 0, 0, ResidencyPolicyKind::exact, 0.05f, 0, window);
      std::uint32_t none = 0;
      auto d = off.rt->open_context(1, 64, prompt_tokens, none);
      ASSERT_TRUE(d.ok());
      prefill(off, d->handle, s, 0, reused);
      const std::vector<float> want = run_rest(off, d->handle, s, reused);
      ASSERT_EQ(want.size(), got.size());
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "seed " << seed << " request " << r << ": shared " << shared << ", prompt " << prompt << ", reused " << reused;
      off.rt->finish(d->handle);
      if (rng() % 4 == 0) {
        sm.rt->finish(c->handle);
      } else {
        sm.rt->finish_retaining(c->handle, s.tokens);
      }
      ASSERT_EQ(sm.rt->check(), nullptr) << "seed " << seed;
      ++requests;
    }
    cut += sm.rt->counters().prefix_cache_ring_cuts;
    hits += sm.rt->counters().prefix_cache_hits;
    partial += count_logged(*sm.rt, DecisionKind::adopt, Reason::prefix_cache_partial);
    EXPECT_EQ(sm.rt->counters().heap_allocations_in_steps, 0u);
    sm.rt->release_retained();
    EXPECT_EQ(sm.rt->pages_free(), sm.rt->pages_total());
  }
  std::printf("window layers, random prompts: %llu requests, %llu adopted a prefix, %llu from the cache (%llu with a "
              "partial page), %llu cache adoptions cut\n",
              static_cast<unsigned long long>(requests), static_cast<unsigned long long>(adopted),
              static_cast<unsigned long long>(hits), static_cast<unsigned long long>(partial),
              static_cast<unsigned long long>(cut));
  EXPECT_GT(adopted, 20u);
  EXPECT_GT(hits, 10u);
  EXPECT_GT(cut, 5u);
}

struct Totals {
  std::uint64_t steps = 0, adoptions = 0, copies = 0, reused = 0, kept = 0, dropped = 0, cancels = 0, mid_step = 0,
                queued = 0, device_kept = 0, device_adopted = 0, device_reclaimed = 0,
                device_copied = 0, releases = 0, allowance_seeds = 0, allowance_dropped = 0,
                allowance_waits_at_concurrency = 0, cache_seeds = 0, cache_hits = 0, cache_hit_tokens = 0,
                cache_evictions = 0, cache_shared = 0, partial_pages = 0, prefix_offers = 0;
};

struct Live {
  Sequence seq;
  std::uint32_t prompt = 0;     // tokens of seq that are the prompt
  std::uint32_t length = 0;     // rows written (or adopted)
  ContextId handle;
  std::uint64_t id = 0;
  bool running = false;
};

void run_seed(std::uint64_t seed, Totals& totals) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) { return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng); };
  const std::uint32_t histories = uniform(1, 4);
  const std::uint32_t page_tokens = 2u << uniform(0, 1);
  const std::uint32_t tiles = uniform(1, 2);
  const std::uint32_t extra_pages = uniform(0, 12);
  const std::uint32_t layers = uniform(1, 2);
  const bool device = uniform(0, 3) != 0;  // device retention on in three seeds of four
  // A retained-history allowance (0, 1 or 2 histories that never run a context) from its own
  // generator, so every other draw of the seed is what it was before the allowance existed.
  std::mt19937_64 retain_rng(seed ^ 0x2E7A1AEDull);
  const std::uint32_t retained = std::uniform_int_distribution<std::uint32_t>(0, 2)(retain_rng);
  // A host prefix cache in half the seeds (2 to 40 pages: small enough to evict), from its own generator too.
  std::mt19937_64 cache_rng(seed ^ 0xCAC4Eull);
  const std::uint32_t cache_pages = cache_rng() % 2 == 0 ? 0 : std::uniform_int_distribution<std::uint32_t>(2, 40)(cache_rng);
  Small sm = make_small(histories, true, seed, page_tokens, tiles, extra_pages, layers, device, 0, retained,
                        ResidencyPolicyKind::exact, 0.05f, cache_pages);
  ASSERT_NE(sm.rt, nullptr);
  KvRuntime& rt = *sm.rt;
  std::vector<Sequence> finished;  // conversations to follow up
  const Sequence system = sequence_of(uniform(4, 20), seed * 31 + 7);
  std::vector<Live> live;
  std::vector<AdmitResult> admitted(8);
  std::uint64_t next_id = 1;
  const std::uint64_t heap_before = rt.counters().heap_allocations_in_steps;

  auto take_admitted = [&]() {
    const std::uint32_t n = rt.take_admitted(admitted);
    for (std::uint32_t i = 0; i < n; ++i) {
      for (Live& l : live) {
        if (l.id == admitted[i].request_id) {
          l.running = true;
          l.handle = admitted[i].handle;
          l.length = 0;  // admitted from the queue: adopts nothing
        }
      }
    }
  };
  auto remove = [&](std::size_t i) {
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    take_admitted();
  };

  for (std::uint32_t op = 0; op < 60; ++op) {
    const std::uint32_t dice = uniform(0, 99);
    std::vector<std::size_t> running;
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].running) running.push_back(i);
    }
    if (dice < 20 && live.size() < 6) {  // a new request: a follow-up, a shared system prefix, or a stranger
      Live l;
      // Kinds: a follow-up, a shared system prefix, a stranger, or a prompt repeated (the first
      // tokens of a finished conversation: its answer filled the pages past them).
      const std::uint32_t kind = uniform(0, 3);
      if (kind == 0 && !finished.empty()) l.seq = finished[uniform(0, static_cast<std::uint32_t>(finished.size() - 1))];
      if (kind == 1) l.seq = system;
      if (kind == 3 && !finished.empty()) {
        const Sequence& f = finished[uniform(0, static_cast<std::uint32_t>(finished.size() - 1))];
        const std::uint32_t n = uniform(2, static_cast<std::uint32_t>(f.tokens.size()));
        for (std::uint32_t t = 0; t < n; ++t) l.seq.push(f.tokens[t]);
      } else {
        const Sequence own = sequence_of(uniform(1, 12), seed * 1000 + op);
        for (std::int32_t t : own.tokens) l.seq.push(t);
      }
      if (l.seq.tokens.size() + 8 > sm.max_context) continue;
      l.prompt = static_cast<std::uint32_t>(l.seq.tokens.size());
      l.id = next_id++;
      std::uint32_t reused = 0;
      auto r = rt.open_context(l.id, sm.max_context, l.seq.tokens, reused);
      ASSERT_TRUE(r.ok()) << r.error().describe();
      l.running = r->outcome == AdmitOutcome::admitted;
      totals.queued += l.running ? 0 : 1;
      if (r->outcome == AdmitOutcome::queued && r->reason == Reason::no_free_history) {
        // Admission never waits on a retained history: it waits for a history only when the
        // concurrency's worth of contexts run (or every other history is retired or held).
        std::uint32_t running_now = 0;
        for (const Live& x : live) running_now += x.running ? 1 : 0;
        ASSERT_TRUE(running_now == rt.plan().host.concurrency ||
                    rt.histories_free() == 0)
            << "seed " << seed << " op " << op << ": waits for a history with " << running_now << " running and "
            << rt.histories_free() << " free";
        totals.allowance_waits_at_concurrency += retained > 0 ? 1 : 0;
      }
      l.handle = r->handle;
      l.length = reused;
      ASSERT_LT(reused, l.prompt) << "at least one prompt token is prefilled";
      ASSERT_TRUE(reused % sm.page_tokens == 0 || reused + 1 == l.prompt)
          << "whole pages, or (a partial last page from the cache) every prompt token but the last";
      totals.partial_pages += reused % sm.page_tokens != 0 ? 1 : 0;
      if (l.running && reused > 0) {
        expect_rows(sm, l.handle, l.seq, reused, "adopted");
        ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "seed " << seed << " op " << op;
        // The adopted history as attention reads it (device pages handed over, or staged from the
        // host) equals the contiguous reference: one prompt token fed against it.
        ReferenceKv ref(sm.g, sm.q_heads, sm.page_tokens);
        const std::uint32_t rc = ref.open();
        const std::size_t row_floats = std::size_t{sm.g.kv_heads} * sm.g.head_dim;
        std::vector<float> k, v;
        for (std::uint32_t layer = 0; layer < sm.g.dense_layers; ++layer) {
          rows_of(l.seq, layer, 0, reused, row_floats, k, v);
          ref.append(rc, layer, k.data(), v.data(), reused);
        }
        feed(sm, l.handle, l.seq, reused, 1, &ref, rc);
        ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "seed " << seed << " op " << op << ": adopted attention";
        l.length = reused + 1;
        ++totals.steps;
      }
      live.push_back(l);
    } else if (dice == 99) {  // shutdown's release: retained device pages back to the pool, prefixes kept
      const std::uint64_t held = rt.counters().retained_device_pages;
      const std::uint32_t free_before = rt.pages_free();
      rt.release_retained();
      ASSERT_EQ(rt.counters().retained_device_pages, 0u) << "seed " << seed << " op " << op;
      ASSERT_GE(rt.pages_free(), free_before + held) << "seed " << seed << " op " << op << ": every retained page came back";
      ++totals.releases;
    } else if (dice < 35 && !running.empty()) {  // finish (retaining or not) or cancel
      const std::size_t i = running[uniform(0, static_cast<std::uint32_t>(running.size() - 1))];
      Live& l = live[i];
      const std::uint32_t how = uniform(0, 5);
      if (how <= 3) {
        expect_rows(sm, l.handle, l.seq, l.length, "before finishing");
        ASSERT_FALSE(::testing::Test::HasFatalFailure()) << "seed " << seed << " op " << op;
        Sequence written;
        for (std::uint32_t t = 0; t < l.length; ++t) written.push(l.seq.tokens[t]);
        rt.finish_retaining(l.handle, written.tokens);
        if (l.length >= sm.page_tokens) finished.push_back(written);
      } else if (how == 4) {
        rt.finish(l.handle);
      } else {
        rt.cancel(l.handle);
        ++totals.cancels;
      }
      remove(i);
    } else if (dice >= 94 && !running.empty()) {  // a running context's rows so far offered to the cache (serve: at its first token)
      Live& l = live[running[uniform(0, static_cast<std::uint32_t>(running.size() - 1))]];
      Sequence written;
      for (std::uint32_t t = 0; t < l.length; ++t) written.push(l.seq.tokens[t]);
      rt.offer_prefix(l.handle, written.tokens);
      if (l.length >= sm.page_tokens) finished.push_back(written);
      ++totals.prefix_offers;
    } else if (!running.empty()) {  // a step over a random subset
      std::vector<StepEntry> entries;
      std::vector<std::size_t> chosen;
      for (const std::size_t i : running) {
        Live& l = live[i];
        if (l.length + 1 >= sm.max_context || uniform(0, 3) == 0) continue;
        if (l.length >= l.seq.tokens.size()) l.seq.push(static_cast<std::int32_t>(mix(l.seq.prefix_hash.back()) % 30000));
        const std::uint32_t left = static_cast<std::uint32_t>(l.seq.tokens.size()) - l.length;
        const std::uint32_t n = std::min({left, sm.chunk_tokens, uniform(1, sm.chunk_tokens)});
        entries.push_back(StepEntry{l.handle, n});
        chosen.push_back(i);
      }
      if (entries.empty()) continue;
      std::uint32_t total = 0;
      for (const StepEntry& e : entries) total += e.tokens_new;
      const std::size_t row_floats = std::size_t{sm.g.kv_heads} * sm.g.head_dim;
      const std::size_t qe = std::size_t{sm.q_heads} * sm.g.head_dim;
      ASSERT_TRUE(rt.begin_step(entries).ok()) << "seed " << seed << " op " << op;
      const bool cancel_mid = uniform(0, 19) == 0;
      std::vector<float> k(total * row_floats), v(total * row_floats), q(total * qe, 0.25f), out(total * qe), ek, ev;
      for (std::uint32_t layer = 0; layer < sm.g.dense_layers; ++layer) {
        std::size_t at = 0;
        for (std::size_t e = 0; e < entries.size(); ++e) {
          const Live& l = live[chosen[e]];
          rows_of(l.seq, layer, l.length, entries[e].tokens_new, row_floats, ek, ev);
          std::copy(ek.begin(), ek.end(), k.begin() + static_cast<std::ptrdiff_t>(at * row_floats));
          std::copy(ev.begin(), ev.end(), v.begin() + static_cast<std::ptrdiff_t>(at * row_floats));
          at += entries[e].tokens_new;
        }
        ASSERT_TRUE(rt.write_kv(layer, k.data(), v.data()).ok());
        ASSERT_TRUE(rt.attend(layer, q.data(), out.data()).ok());
        if (cancel_mid && layer == 0) rt.cancel(entries[0].context);
      }
      ASSERT_TRUE(rt.end_step().ok());
      ++totals.steps;
      for (std::size_t e = 0; e < entries.size(); ++e) live[chosen[e]].length += entries[e].tokens_new;
      if (cancel_mid) {
        ++totals.mid_step;
        remove(chosen[0]);
      }
    }
    const char* broken = rt.check();
    ASSERT_EQ(broken, nullptr) << "seed " << seed << " op " << op << ": " << broken;
    std::uint32_t running_now = 0;
    for (const Live& x : live) running_now += x.running ? 1 : 0;
    ASSERT_LE(running_now, rt.plan().host.concurrency) << "seed " << seed << " op " << op << ": the extra histories run nothing";
  }
  // Finish what runs; the queued are admitted as histories come back, then finish in turn.
  while (!live.empty()) {
    std::size_t i = 0;
    while (i < live.size() && !live[i].running) ++i;
    ASSERT_LT(i, live.size()) << "seed " << seed << ": requests queued with nothing running";
    rt.finish(live[i].handle);
    remove(i);
  }
  EXPECT_EQ(rt.check(), nullptr);
  if (!device) {
    EXPECT_EQ(rt.counters().retained_device_pages_kept, 0u) << "seed " << seed;
    EXPECT_EQ(rt.counters().prefix_device_pages_copied, 0u) << "seed " << seed;
  }
  const std::uint64_t kept_at_end = rt.counters().retained_device_pages;
  // Shutdown: the retained histories' device pages go back through the runtime; then every page is free.
  rt.release_retained();
  EXPECT_EQ(rt.check(), nullptr);
  EXPECT_EQ(rt.pages_free(), rt.pages_total()) << "seed " << seed << ": every page returned (" << kept_at_end
                                               << " were retained on the device)";
  EXPECT_EQ(rt.histories_free(), rt.plan().host.history_slots) << "seed " << seed << ": every history back";
  EXPECT_EQ(rt.plan().host.history_slots, histories + retained);
  EXPECT_EQ(rt.counters().device_allocations_after_warmup, 0u);
  EXPECT_EQ(rt.counters().heap_allocations_in_steps, heap_before) << "seed " << seed << ": invariant 7";
  const KvCounters& c = rt.counters();
  totals.adoptions += c.prefix_adoptions;
  totals.copies += c.prefix_copies;
  totals.reused += c.prefix_reused_tokens;
  totals.kept += c.retained_kept;
  totals.dropped += c.retained_dropped;
  totals.device_kept += c.retained_device_pages_kept;
  totals.device_adopted += c.retained_device_pages_adopted;
  totals.device_reclaimed += c.retained_device_pages_reclaimed;
  totals.device_copied += c.prefix_device_pages_copied;
  if (cache_pages > 0) {
    ++totals.cache_seeds;
    totals.cache_hits += c.prefix_cache_hits;
    totals.cache_hit_tokens += c.prefix_cache_hit_tokens;
    totals.cache_evictions += c.prefix_cache_evictions;
    totals.cache_shared += c.prefix_cache_pages_shared;
    EXPECT_LE(c.prefix_cache_pages, cache_pages) << "seed " << seed;
    EXPECT_EQ(c.prefix_cache_pages_stored, c.prefix_cache_pages + c.prefix_cache_evictions)
        << "seed " << seed << ": every stored page is held or was evicted";
  } else {
    EXPECT_EQ(c.prefix_cache_lookups, 0u) << "seed " << seed << ": no cache, no lookups";
  }
  if (retained > 0) {
    ++totals.allowance_seeds;
    totals.allowance_dropped += c.retained_dropped;
  }
  EXPECT_EQ(c.retained_device_pages_kept, c.retained_device_pages_adopted + c.retained_device_pages_reclaimed +
                                              c.retained_device_pages)
      << "seed " << seed << ": every retained device page is adopted, reclaimed or still held";
}

TEST(PrefixReuseProperty, AdoptShareDropCancelKeepTheInvariants) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  const std::uint32_t seeds = seeds_from_environment();
  Totals totals;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    run_seed(seed, totals);
    if (HasFatalFailure()) return;
  }
  std::printf("%u seeds: %llu steps, %llu adoptions (%llu copied), %llu tokens reused, %llu retained, %llu dropped, "
              "%llu cancels (%llu mid-step), %llu queued; device pages: %llu retained, %llu handed over, %llu reclaimed, "
              "%llu copied d2d; %llu shutdown releases\n",
              seeds, static_cast<unsigned long long>(totals.steps), static_cast<unsigned long long>(totals.adoptions),
              static_cast<unsigned long long>(totals.copies), static_cast<unsigned long long>(totals.reused),
              static_cast<unsigned long long>(totals.kept), static_cast<unsigned long long>(totals.dropped),
              static_cast<unsigned long long>(totals.cancels), static_cast<unsigned long long>(totals.mid_step),
              static_cast<unsigned long long>(totals.queued), static_cast<unsigned long long>(totals.device_kept),
              static_cast<unsigned long long>(totals.device_adopted),
              static_cast<unsigned long long>(totals.device_reclaimed), static_cast<unsigned long long>(totals.device_copied),
              static_cast<unsigned long long>(totals.releases));
  std::printf("retained-history allowance in %llu seeds: %llu retained dropped there, %llu waits for a history at the "
              "concurrency\n",
              static_cast<unsigned long long>(totals.allowance_seeds), static_cast<unsigned long long>(totals.allowance_dropped),
              static_cast<unsigned long long>(totals.allowance_waits_at_concurrency));
  std::printf("host prefix cache in %llu seeds: %llu hits (%llu tokens), %llu pages shared, %llu evicted, %llu partial "
              "last pages adopted, %llu running contexts offered\n",
              static_cast<unsigned long long>(totals.cache_seeds), static_cast<unsigned long long>(totals.cache_hits),
              static_cast<unsigned long long>(totals.cache_hit_tokens), static_cast<unsigned long long>(totals.cache_shared),
              static_cast<unsigned long long>(totals.cache_evictions), static_cast<unsigned long long>(totals.partial_pages),
              static_cast<unsigned long long>(totals.prefix_offers));
  EXPECT_GT(totals.partial_pages, 0u) << "repeated prompts adopted their partial last page";
  EXPECT_GT(totals.cache_hits, 0u) << "the prefix cache gave pages that no retained history held";
  EXPECT_GT(totals.cache_evictions, 0u) << "small caches evicted";
  EXPECT_GT(totals.cache_shared, 0u) << "a shared system prefix is stored once";
  // The mix must have exercised what it claims to.
  EXPECT_GT(totals.allowance_seeds, seeds / 2);
  EXPECT_GT(totals.allowance_dropped, 0u) << "more conversations than histories drop even with the allowance";
  EXPECT_GT(totals.allowance_waits_at_concurrency, 0u) << "admission waited at the concurrency with extra histories free";
  EXPECT_GT(totals.adoptions, seeds / 4);
  EXPECT_GT(totals.copies, 0u);
  EXPECT_GT(totals.dropped, 0u);
  EXPECT_GT(totals.cancels, 0u);
  EXPECT_GT(totals.mid_step, 0u);
  EXPECT_GT(totals.device_adopted, 0u);
  EXPECT_GT(totals.device_reclaimed, 0u);
  EXPECT_GT(totals.device_copied, 0u);
  EXPECT_GT(totals.releases, 0u);
}


// Copy on adopt takes the source's promoted pages too (docs/PREFIX.md, "Copied device to device on
// adopt"): a source under the hotness policy holds pages below its run that the policy promoted;
// a request sharing part of its history copies them device to device and holds them promoted.
struct PromotedRun {
  std::vector<float> outputs;
  std::uint64_t copied = 0, promoted = 0, source_promoted = 0;
  std::uint64_t staged_first_step = 0, page_bytes = 0;
  Explanation sharer;
};

PromotedRun run_promoted(bool device, std::uint32_t pool, float th) {
  PromotedRun out;
  Small sm = make_small(4, true, 5, 4, 1, 0, 2, device, pool, 0, ResidencyPolicyKind::hotness, th);
  EXPECT_NE(sm.rt, nullptr);
  if (sm.rt == nullptr) return out;
  KvRuntime& rt = *sm.rt;
  out.page_bytes = rt.plan().arena.page_bytes;
  Sequence a_seq = sequence_of(72, 51);
  std::uint32_t reused = 0;
  auto a = rt.open_context(1, 64, std::span<const std::int32_t>(a_seq.tokens).first(48), reused);
  ReferenceKv ref(sm.g, sm.q_heads, sm.page_tokens);
  const std::uint32_t ra = ref.open();
  // A third context shares the pool while A prefills, then leaves: A grows into its pages by
  // promotions of pages below its run (what the hotness policy chooses).
  Sequence c_seq = sequence_of(48, 53);
  auto c = rt.open_context(3, 64, c_seq.tokens, reused);
  Sequence e_seq = sequence_of(48, 54);
  auto e = rt.open_context(4, 64, e_seq.tokens, reused);
  for (std::uint32_t at = 0; at < 48; at += 8) {
    feed(sm, a->handle, a_seq, at, 8, &ref, ra, &out.outputs);
    feed(sm, c->handle, c_seq, at, 8);
    feed(sm, e->handle, e_seq, at, 8);
    if (::testing::Test::HasFatalFailure()) return out;
  }
  rt.finish(c->handle);
  for (std::uint32_t x = 48; x < 54; ++x) {
    feed(sm, a->handle, a_seq, x, 1, &ref, ra, &out.outputs);
    if (::testing::Test::HasFatalFailure()) return out;
  }
  // A's promoted pages that the sharer's 8 pages take (below page 7: not next to its run).
  for (const ResidentRun& r : rt.explain(a->handle).runs) {
    if (std::string(r.reason).find("promoted") == 0 && r.logical_first + r.pages <= 7) out.source_promoted += r.pages;
  }
  rt.finish_retaining(a->handle, std::span<const std::int32_t>(a_seq.tokens).first(54));
  rt.finish(e->handle);
  Sequence b_seq;
  for (std::uint32_t t = 0; t < 32; ++t) b_seq.push(a_seq.tokens[t]);
  for (std::int32_t x : sequence_of(6, 52).tokens) b_seq.push(x);
  auto b = rt.open_context(2, 64, b_seq.tokens, reused);
  EXPECT_EQ(reused, 32u);
  out.sharer = rt.explain(b->handle);
  const std::uint32_t rb = reference_of(ref, sm, b_seq, 32);
  const std::uint64_t staged0 = rt.counters().bytes_staged;
  feed(sm, b->handle, b_seq, 32, 1, &ref, rb, &out.outputs);
  out.staged_first_step = rt.counters().bytes_staged - staged0;
  for (std::uint32_t x = 33; x < 38; ++x) {
    feed(sm, b->handle, b_seq, x, 1, &ref, rb, &out.outputs);
    if (::testing::Test::HasFatalFailure()) return out;
    EXPECT_EQ(rt.check(), nullptr);
  }
  expect_rows(sm, b->handle, b_seq, 38, "sharer");
  out.copied = rt.counters().prefix_device_pages_copied;
  out.promoted = rt.counters().prefix_device_pages_promoted;
  EXPECT_EQ(rt.counters().heap_allocations_in_steps, 0u);
  rt.finish(b->handle);
  EXPECT_EQ(rt.check(), nullptr);
  return out;
}

TEST(PrefixReuseDevice, CopyOnAdoptPromotesTheSourcesPromotedPagesDeviceToDevice) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  // 44 pool pages, hotness threshold 0.25: A holds 4 promoted pages below its run in the shared
  // part (found by trying pools and thresholds; the counts below are what this layout gives).
  const PromotedRun off = run_promoted(false, 44, 0.25f);
  ASSERT_FALSE(HasFatalFailure());
  const PromotedRun on = run_promoted(true, 44, 0.25f);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(on.outputs.size(), off.outputs.size());
  EXPECT_EQ(std::memcmp(on.outputs.data(), off.outputs.data(), on.outputs.size() * sizeof(float)), 0)
      << "outputs with the promoted pages copied equal outputs with every shared page staged, byte for byte";
  EXPECT_EQ(on.source_promoted, 4u) << "the layout this test needs: A holds promoted pages in the shared part";
  EXPECT_EQ(on.promoted, on.source_promoted) << "every resident promoted page of the shared part is copied d2d";
  EXPECT_GT(on.copied, on.promoted) << "besides the sinks and run pages";
  EXPECT_EQ(on.sharer.adopted_device_promoted, on.promoted);
  EXPECT_EQ(on.sharer.adopted_device_copied, on.copied);
  EXPECT_EQ(off.promoted, 0u);
  EXPECT_EQ(off.copied, 0u);
  // What is copied is not staged: the first step stages exactly the copied pages' bytes fewer.
  EXPECT_EQ(on.staged_first_step + on.copied * on.page_bytes, off.staged_first_step);
  EXPECT_NE(explanation_text(on.sharer).find("promoted from a retained prefix, device to device"), std::string::npos)
      << explanation_text(on.sharer);
  std::printf("sharer of a hotness source: %llu pages copied d2d, %llu of them promoted pages; first step staged %llu "
              "bytes against %llu without device retention\n",
              static_cast<unsigned long long>(on.copied), static_cast<unsigned long long>(on.promoted),
              static_cast<unsigned long long>(on.staged_first_step), static_cast<unsigned long long>(off.staged_first_step));
}

}  // namespace
}  // namespace activekv
