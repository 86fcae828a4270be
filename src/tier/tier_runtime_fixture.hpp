// tier_runtime_fixture.hpp — what the tier runtime tests share: two "servers" (a tier port on one
// Redis and a KV runtime using it), rows that are a function of the tokens before them, chunked
// prefill checked against the contiguous reference, and the fixture that starts Redis.
//
// Invariant: a row depends only on the tokens up to it (and its layer), as a model's does, so a
// context that restores a prefix from the tier must hold exactly the rows it would have written.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/explain.hpp"
#include "activekv/kv_runtime.hpp"
#include "runtime/reference_kv.hpp"
#include "tier/redis_fixture.hpp"
#include "tier/redis_tier.hpp"

namespace activekv::tier_test {

using runtime::ReferenceKv;
using tier::testing::RedisServer;

inline constexpr float reference_tolerance = 2e-5f;
inline constexpr std::uint32_t kPage = 4, kBlock = 8, kMaxContext = 64;

inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline Geometry geometry() {
  Geometry g;
  g.dense_layers = 2;
  g.kv_heads = 1;
  g.head_dim = 8;
  g.dtype = DType::f16;
  return g;
}

// One "server": a tier port on the shared Redis and a runtime using it.
struct Server {
  Server() = default;
  Server(Server&&) = default;
  ~Server() {
    if (tier != nullptr) tier->drain();  // its writer reads the host pool, which goes first
  }
  std::unique_ptr<tier::RedisTier> tier;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvRuntime> rt;
  Geometry g = geometry();
  std::uint32_t q_heads = 2;
};

// A server on the shared Redis at `url` (tier and prefix reuse on), or, with an empty url, a runtime without
// either (the no-reuse reference).
// cache_pages: a host prefix cache of that many pages (one page index of every layer) beside the histories.
// checkpoint_pages: a hybrid's state checkpoint every that many pages (besides the newest and the prompt's);
// the host pool and the device arena make room for the states of a hybrid geometry.
inline Server make_server(const std::string& url, std::uint32_t histories = 2, const Geometry& g = geometry(),
                          std::uint32_t cache_pages = 0, std::uint32_t checkpoint_pages = 0) {
  Server s;
  s.g = g;
  s.q_heads = 2 * g.kv_heads;
  if (!url.empty()) {
    tier::RedisTierSettings ts;
    auto store = tier::parse_tier_url(url, "--kv-tier");
    EXPECT_TRUE(store.ok());
    ts.store = store.value();
    ts.store.command_timeout_ms = 200;
    ts.store.backoff_ms_min = 50;
    ts.block_tokens = kBlock;
    ts.page_tokens = kPage;
    ts.max_context_tokens = kMaxContext;
    ts.model_identity = 77;
    ts.geometry = s.g;
    auto t = tier::RedisTier::create(ts);
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().describe());
    s.tier = std::move(t).value();
  }

  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = s.g;
  m.page_tokens = kPage;
  m.tile_tokens = 2 * kPage;
  m.tiles = 2;
  m.max_context_tokens = kMaxContext;
  m.max_seqs = histories;
  m.chunk_tokens = 2 * kPage;
  m.state_checkpoint_pages = checkpoint_pages;
  // Whole segments for every layer and room for every checkpoint a hybrid can hold: `histories` fit.
  m.host_pool_bytes = std::uint64_t{histories} * (std::uint64_t{s.g.dense_layers} * kMaxContext * s.g.row_bytes() +
                                                  (2 + kMaxContext / kBlock) * s.g.recurrent_state_bytes);
  m.prefix_cache_bytes = std::uint64_t{cache_pages} * kPage * s.g.row_bytes() * s.g.dense_layers;
  m.host_pool_bytes += m.prefix_cache_bytes;
  const std::uint64_t floor_pages = std::uint64_t{s.g.dense_layers} * (1 + pages_spanned_max(m.chunk_tokens, kPage));
  const std::uint64_t pages = floor_pages * histories + 8;
  m.device_pool_bytes = 4 * arena_alignment_bytes + std::uint64_t{m.tiles} * m.tile_tokens * s.g.row_bytes() +
                        pages * kPage * s.g.row_bytes();
  if (s.g.recurrent_state_bytes != 0) {
    m.device_pool_bytes += std::uint64_t{histories} * (s.g.recurrent_state_bytes + arena_alignment_bytes);
  }
  settings.q_heads = s.q_heads;
  settings.prefix_reuse = !url.empty();
  settings.tier = s.tier.get();
  BackendOptions options;
  options.deterministic = true;
  auto backend = make_backend("host", options);
  EXPECT_TRUE(backend.ok());
  s.backend = std::move(backend).value();
  auto rt = KvRuntime::create(settings, *s.backend);
  EXPECT_TRUE(rt.ok()) << (rt.ok() ? "" : rt.error().describe());
  s.rt = std::move(rt).value();
  return s;
}

struct Sequence {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint64_t> prefix_hash;
  void push(std::int32_t t) {
    tokens.push_back(t);
    prefix_hash.push_back(mix((prefix_hash.empty() ? 0x1234 : prefix_hash.back()) ^ static_cast<std::uint32_t>(t)));
  }
};

inline Sequence sequence_of(std::uint32_t n, std::uint64_t seed) {
  Sequence s;
  for (std::uint32_t i = 0; i < n; ++i) s.push(static_cast<std::int32_t>(mix(seed * 7919 + i) % 30000));
  return s;
}

inline void rows_of(const Sequence& s, std::uint32_t layer, std::uint32_t first, std::uint32_t n, std::size_t row_floats,
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

// Feeds tokens [from, to) of s to c in chunks; outputs compared with the reference over every row of s.
inline void prefill(Server& sv, ContextId c, const Sequence& s, std::uint32_t from, std::uint32_t to) {
  const std::size_t row_floats = std::size_t{sv.g.kv_heads} * sv.g.head_dim;
  const std::size_t qe = std::size_t{sv.q_heads} * sv.g.head_dim;
  ReferenceKv ref(sv.g, sv.q_heads, kPage);
  const std::uint32_t r = ref.open();
  std::vector<float> k, v;
  for (std::uint32_t l = 0; l < sv.g.dense_layers && from > 0; ++l) {
    rows_of(s, l, 0, from, row_floats, k, v);
    ref.append(r, l, k.data(), v.data(), from);
  }
  for (std::uint32_t at = from; at < to;) {
    const std::uint32_t n = std::min(2 * kPage, to - at);
    const StepEntry e{c, n};
    ASSERT_TRUE(sv.rt->begin_step({&e, 1}).ok());
    std::vector<float> q(n * qe), out(n * qe), want(n * qe);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(mix(i + at * 77) % 1000) / 1000.0f - 0.5f;
    for (std::uint32_t l = 0; l < sv.g.dense_layers; ++l) {
      rows_of(s, l, at, n, row_floats, k, v);
      ASSERT_TRUE(sv.rt->write_kv(l, k.data(), v.data()).ok());
      ASSERT_TRUE(sv.rt->attend(l, q.data(), out.data()).ok());
      ref.append(r, l, k.data(), v.data(), n);
      ref.attend(r, l, q.data(), n, at, want.data());
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], reference_tolerance) << "layer " << l;
    }
    ASSERT_TRUE(sv.rt->end_step().ok());
    at += n;
  }
}

// Every host row of c below `length` equals the row the model writes for s.
inline void expect_rows(Server& sv, ContextId c, const Sequence& s, std::uint32_t length) {
  const std::size_t row_floats = std::size_t{sv.g.kv_heads} * sv.g.head_dim;
  ReferenceKv encoded(sv.g, sv.q_heads, kPage);
  const std::uint32_t r = encoded.open();
  std::vector<float> k, v;
  for (std::uint32_t l = 0; l < sv.g.dense_layers; ++l) {
    rows_of(s, l, 0, length, row_floats, k, v);
    encoded.append(r, l, k.data(), v.data(), length);
    for (std::uint32_t t = 0; t < length; ++t) {
      ASSERT_EQ(std::memcmp(sv.rt->host_row(c, l, t).data(), encoded.encoded_row(r, l, t).data(), sv.g.row_bytes()), 0)
          << "layer " << l << " token " << t;
    }
  }
}

// Admission as the serving engine does it: the tier's background lookup first (prepare_tier says
// when it ended; the caller would step other contexts meanwhile), then open_context.
inline Result<AdmitResult> open_ready(Server& sv, std::uint64_t id, std::span<const std::int32_t> prompt, std::uint32_t& reused) {
  for (int i = 0; i < 200 && !sv.rt->prepare_tier(prompt); ++i) sv.rt->wait_tier(50);
  return sv.rt->open_context(id, kMaxContext, prompt, reused);
}

class TierRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
    if (!RedisServer::available()) GTEST_SKIP() << "redis-server is not installed (scripts/install-deps.sh --test)";
    ASSERT_TRUE(redis.start());
  }
  RedisServer redis;
};

}  // namespace activekv::tier_test
