// tier_runtime_test.cpp — two KV runtimes ("two servers") sharing one Redis through RedisTier.
//
// The rows are a function of the tokens before them, as a model's are (the same
// construction as runtime/prefix_reuse_test.cpp): a context that restores a
// prefix from the tier must hold exactly the rows it would have written itself,
// and its attention outputs must match the contiguous reference.
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

namespace activekv {
namespace {

using runtime::ReferenceKv;
using tier::testing::RedisServer;

constexpr float reference_tolerance = 2e-5f;
constexpr std::uint32_t kPage = 4, kBlock = 8, kMaxContext = 64;

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Geometry geometry() {
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

Server make_server(const std::string& url, std::uint32_t histories = 2, const Geometry& g = geometry()) {
  Server s;
  s.g = g;
  s.q_heads = 2 * g.kv_heads;
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

  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = s.g;
  m.page_tokens = kPage;
  m.tile_tokens = 2 * kPage;
  m.tiles = 2;
  m.max_context_tokens = kMaxContext;
  m.max_seqs = histories;
  m.chunk_tokens = 2 * kPage;
  m.host_pool_bytes = std::uint64_t{histories} * s.g.dense_layers * kMaxContext * s.g.row_bytes();
  const std::uint64_t floor_pages = std::uint64_t{s.g.dense_layers} * (1 + pages_spanned_max(m.chunk_tokens, kPage));
  const std::uint64_t pages = floor_pages * histories + 8;
  m.device_pool_bytes = 4 * arena_alignment_bytes + std::uint64_t{m.tiles} * m.tile_tokens * s.g.row_bytes() +
                        pages * kPage * s.g.row_bytes();
  settings.q_heads = s.q_heads;
  settings.prefix_reuse = true;
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

Sequence sequence_of(std::uint32_t n, std::uint64_t seed) {
  Sequence s;
  for (std::uint32_t i = 0; i < n; ++i) s.push(static_cast<std::int32_t>(mix(seed * 7919 + i) % 30000));
  return s;
}

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

// Feeds tokens [from, to) of s to c in chunks; outputs compared with the reference over every row of s.
void prefill(Server& sv, ContextId c, const Sequence& s, std::uint32_t from, std::uint32_t to) {
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
void expect_rows(Server& sv, ContextId c, const Sequence& s, std::uint32_t length) {
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
Result<AdmitResult> open_ready(Server& sv, std::uint64_t id, std::span<const std::int32_t> prompt, std::uint32_t& reused) {
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

TEST_F(TierRuntime, AFollowUpOnAnotherServerRestoresTheFirstTurnFromTheTier) {
  Server first = make_server(redis.url());
  Server second = make_server(redis.url());
  Sequence conversation = sequence_of(30, 1);
  const std::uint32_t turn = 22;  // 2 whole blocks (16 tokens) + 6
  std::uint32_t reused = 99;
  auto a = open_ready(first, 1, std::span(conversation.tokens).first(turn), reused);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reused, 0u);
  prefill(first, a->handle, conversation, 0, turn);
  first.rt->finish_retaining(a->handle, std::span(conversation.tokens).first(turn));
  first.tier->drain();
  EXPECT_EQ(first.tier->counters().writes.load(), 2u);
  EXPECT_EQ(first.tier->counters().bytes_written.load(), 2 * tier::tier_block_bytes(first.g, kBlock));

  // The follow-up (30 tokens) lands on the second server, which never saw the first turn.
  auto b = open_ready(second, 2, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 16u);
  EXPECT_EQ(second.rt->length(b->handle), 16u);
  EXPECT_EQ(second.tier->counters().hits.load(), 2u);
  EXPECT_EQ(second.tier->counters().misses.load(), 1u);  // block 2 was never written
  EXPECT_EQ(second.rt->counters().tier_restores, 1u);
  EXPECT_EQ(second.rt->counters().tier_restored_tokens, 16u);
  expect_rows(second, b->handle, conversation, 16);
  const Explanation e = second.rt->explain(b->handle);
  EXPECT_EQ(e.tier_pages_first, 0u);
  EXPECT_EQ(e.tier_pages_end, 4u);
  EXPECT_NE(explanation_text(e).find("restored: pages 0..3 of every layer came from the shared KV tier"), std::string::npos)
      << explanation_text(e);
  prefill(second, b->handle, conversation, 16, 30);  // outputs checked against the reference over all 30 rows
  second.rt->finish_retaining(b->handle, conversation.tokens);
  second.tier->drain();
  // 30 tokens: 3 whole blocks; 0 and 1 came from the tier, so only block 2 is written.
  EXPECT_EQ(second.tier->counters().writes.load(), 1u);
  EXPECT_EQ(second.rt->check(), nullptr);
}

TEST_F(TierRuntime, ALocalPrefixIsExtendedFromTheTierPastIt) {
  Server first = make_server(redis.url());
  Server second = make_server(redis.url());
  Sequence conversation = sequence_of(40, 2);
  std::uint32_t reused = 0;
  // The second server holds the first 12 tokens (3 pages) locally.
  auto local = open_ready(second, 1, std::span(conversation.tokens).first(12), reused);
  ASSERT_TRUE(local.ok());
  prefill(second, local->handle, conversation, 0, 12);
  second.rt->finish_retaining(local->handle, std::span(conversation.tokens).first(12));
  second.tier->drain();
  // The first server runs 33 tokens: block 0 comes from the second server's write, then 4 blocks in the tier.
  auto a = open_ready(first, 2, std::span(conversation.tokens).first(33), reused);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reused, 8u);
  prefill(first, a->handle, conversation, reused, 33);
  first.rt->finish_retaining(a->handle, std::span(conversation.tokens).first(33));
  first.tier->drain();
  // On the second server: 12 tokens adopted locally, blocks 1..3 from the tier (tokens 8..32).
  auto b = open_ready(second, 3, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reused, 32u);
  EXPECT_EQ(second.rt->counters().prefix_reused_tokens, 12u);
  EXPECT_EQ(second.rt->counters().tier_restored_tokens, 20u);
  const Explanation e = second.rt->explain(b->handle);
  EXPECT_EQ(e.adopted_pages, 3u);
  EXPECT_EQ(e.tier_pages_first, 3u);
  EXPECT_EQ(e.tier_pages_end, 8u);
  expect_rows(second, b->handle, conversation, 32);
  prefill(second, b->handle, conversation, 32, 40);
  second.rt->finish(b->handle);
  EXPECT_EQ(second.rt->check(), nullptr);
}

TEST_F(TierRuntime, WithTheStoreDownEveryRequestPrefillsAndTheErrorsAreCounted) {
  Server first = make_server(redis.url());
  Sequence conversation = sequence_of(30, 3);
  std::uint32_t reused = 0;
  auto a = open_ready(first, 1, std::span(conversation.tokens).first(22), reused);
  ASSERT_TRUE(a.ok());
  prefill(first, a->handle, conversation, 0, 22);
  first.rt->finish_retaining(a->handle, std::span(conversation.tokens).first(22));
  first.tier->drain();
  redis.stop();
  Server second = make_server(redis.url());
  auto b = open_ready(second, 2, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reused, 0u);
  EXPECT_GE(second.tier->counters().errors.load(), 1u);
  EXPECT_EQ(second.tier->counters().misses.load(), 1u);
  prefill(second, b->handle, conversation, 0, 30);
  second.rt->finish_retaining(b->handle, conversation.tokens);
  second.tier->drain();
  EXPECT_EQ(second.tier->counters().writes.load(), 0u);
  EXPECT_EQ(second.tier->counters().dropped_writes.load(), 3u);  // the SETs failed: dropped, counted
  EXPECT_EQ(second.rt->check(), nullptr);
}

// The lookup runs on the tier's reader thread: with the store stalled (SIGSTOP: it accepts and
// never answers), a request waiting on it waits in admission while a running context keeps stepping;
// past the timeout it is a miss and the request prefills, with outputs equal to the reference.
TEST_F(TierRuntime, AStalledStoreDoesNotStallTheStepsOfARunningContext) {
  Server first = make_server(redis.url());
  Server second = make_server(redis.url());
  Sequence conversation = sequence_of(30, 5);
  std::uint32_t reused = 0;
  auto a = open_ready(first, 1, std::span(conversation.tokens).first(22), reused);
  ASSERT_TRUE(a.ok());
  prefill(first, a->handle, conversation, 0, 22);
  first.rt->finish_retaining(a->handle, std::span(conversation.tokens).first(22));
  first.tier->drain();

  // Another conversation runs on the second server.
  Sequence other = sequence_of(60, 6);
  auto x = open_ready(second, 2, std::span(other.tokens).first(8), reused);
  ASSERT_TRUE(x.ok());
  prefill(second, x->handle, other, 0, 8);
  std::uint32_t x_length = 8;

  redis.pause();
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  EXPECT_FALSE(second.rt->prepare_tier(conversation.tokens));  // started in the background
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(20));
  std::uint32_t steps_while_waiting = 0;
  auto worst_step = Clock::duration::zero();
  while (!second.rt->prepare_tier(conversation.tokens) && Clock::now() - t0 < std::chrono::seconds(5)) {
    if (x_length + 1 < kMaxContext) {
      const auto s0 = Clock::now();
      prefill(second, x->handle, other, x_length, x_length + 1);  // one decode step, checked
      worst_step = std::max(worst_step, Clock::now() - s0);
      ++x_length;
      ++steps_while_waiting;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto waited = Clock::now() - t0;
  redis.resume();
  EXPECT_GE(waited, std::chrono::milliseconds(150));  // the lookup ran into the 200 ms timeout...
  EXPECT_GE(steps_while_waiting, 10u);                // ...while the other context stepped on
  EXPECT_LT(worst_step, std::chrono::milliseconds(100));
  auto b = second.rt->open_context(3, kMaxContext, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 0u);  // the timed-out lookup is a miss: prefilled
  EXPECT_GE(second.tier->counters().errors.load(), 1u);
  EXPECT_GE(second.tier->counters().misses.load(), 1u);
  prefill(second, b->handle, conversation, 0, 30);
  second.rt->finish(b->handle);
  second.rt->finish(x->handle);
  EXPECT_EQ(second.rt->check(), nullptr);
}

// Write-behind reads the finished history itself (no copy between steps) under a lease: the
// history stays off the free list — a waiting request is not admitted into it — until the write ends.
TEST_F(TierRuntime, AHistoryTheWriterReadsIsNotRecycledUntilTheWriteEnds) {
  Server first = make_server(redis.url(), /*histories=*/1);
  Server second = make_server(redis.url());
  Sequence conversation = sequence_of(30, 7);
  std::uint32_t reused = 0;
  auto a = open_ready(first, 1, std::span(conversation.tokens).first(22), reused);
  ASSERT_TRUE(a.ok());
  prefill(first, a->handle, conversation, 0, 22);
  const std::byte* row8_layer1 = first.rt->host_row(a->handle, 1, 8).data();
  first.tier->writer().pause(true);
  first.rt->finish_retaining(a->handle, std::span(conversation.tokens).first(22));
  EXPECT_EQ(first.rt->counters().tier_leases, 1u);
  EXPECT_EQ(first.tier->writer().queued(), 2u);
  // Block 1's job reads layer 1 from the history's own rows: nothing was copied on the step path.
  EXPECT_EQ(first.tier->writer().queued_rows(1, 1).data(), row8_layer1);
  EXPECT_EQ(first.rt->histories_free(), 0u);
  EXPECT_EQ(first.rt->release_tier_leases(), 1u);

  Sequence other = sequence_of(20, 8);
  auto q = open_ready(first, 2, other.tokens, reused);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->outcome, AdmitOutcome::queued);  // the only history is held by the writer
  EXPECT_EQ(first.rt->release_tier_leases(), 1u);
  std::vector<AdmitResult> admitted(2);
  EXPECT_EQ(first.rt->take_admitted(admitted), 0u);

  first.tier->writer().pause(false);
  first.tier->drain();
  EXPECT_EQ(first.rt->release_tier_leases(), 0u);  // the write ended: the history is given back...
  ASSERT_EQ(first.rt->take_admitted(admitted), 1u);  // ...and the waiting request admitted into it
  EXPECT_EQ(first.tier->counters().writes.load(), 2u);
  EXPECT_EQ(first.rt->check(), nullptr) << first.rt->check();

  // What the writer read is the first turn's rows: the follow-up on the second server restores them.
  auto b = open_ready(second, 3, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reused, 16u);
  expect_rows(second, b->handle, conversation, 16);
  prefill(second, b->handle, conversation, 16, 30);
  second.rt->finish(b->handle);
  prefill(first, admitted[0].handle, other, 0, 20);
  first.rt->finish(admitted[0].handle);
  EXPECT_EQ(first.rt->check(), nullptr);
}

// Redis with maxmemory and an LRU policy evicts blocks, some in the middle of a chain: every
// follow-up still restores only a checked leading run, prefills the rest with outputs equal to
// the reference, and the short runs are counted as misses.
TEST_F(TierRuntime, BlocksEvictedByAnLruStoreAreMissesAndOutputsStayCorrect) {
  Geometry wide = geometry();  // 2 layers × 1 KiB rows: a block is 16 KiB
  wide.kv_heads = 8;
  wide.head_dim = 64;
  Server first = make_server(redis.url(), 2, wide);
  Server second = make_server(redis.url(), 2, wide);
  constexpr std::uint32_t conversations = 16, turn = 26, follow = 30;  // 3 whole blocks each
  std::vector<Sequence> seqs;
  std::uint32_t reused = 0;
  for (std::uint32_t c = 0; c < conversations; ++c) seqs.push_back(sequence_of(follow, 100 + c));
  // The first turns run on the first server, which writes their 3 whole blocks each.
  for (std::uint32_t c = 0; c < conversations; ++c) {
    auto a = open_ready(first, 100 + c, std::span(seqs[c].tokens).first(turn), reused);
    ASSERT_TRUE(a.ok());
    prefill(first, a->handle, seqs[c], reused, turn);
    first.rt->finish_retaining(a->handle, std::span(seqs[c].tokens).first(turn));
    first.tier->drain();
  }
  EXPECT_EQ(first.tier->counters().writes.load(), 3u * conversations)
      << "errors " << first.tier->counters().errors.load() << ", dropped " << first.tier->counters().dropped_writes.load();
  // Every conversation's first block is read again (recently used), then the store is capped at
  // about half of what it holds with an LRU policy: it evicts mostly second and third blocks,
  // breaking chains in the middle.
  std::vector<std::uint64_t> chain(3);
  for (std::uint32_t c = 0; c < conversations; ++c) {
    ASSERT_EQ(tier::tier_block_chain(std::span(seqs[c].tokens).first(turn), kPage, kBlock, 77, chain), 3u);
    ASSERT_NE(redis.command("GET " + tier::tier_block_key(77, wide, chain[0])), "");
  }
  const std::string info = redis.command("INFO memory");
  const auto at = info.find("used_memory:");
  ASSERT_NE(at, std::string::npos) << info;
  const std::uint64_t used = std::stoull(info.substr(at + 12));
  ASSERT_NE(redis.command("CONFIG SET maxmemory-policy allkeys-lru"), "");
  ASSERT_NE(redis.command("CONFIG SET maxmemory " + std::to_string(used - 24 * 17 * 1024)), "");
  ASSERT_NE(redis.command("PING"), "");  // the store evicts as it serves the next command
  const std::string stats = redis.command("INFO stats");
  const auto ev = stats.find("evicted_keys:");
  ASSERT_NE(ev, std::string::npos);
  EXPECT_GT(std::stoull(stats.substr(ev + 13)), 0u) << "the store evicted nothing: the test did not test eviction";

  const std::uint64_t misses_before = second.tier->counters().misses.load();
  std::uint32_t full = 0, partial = 0, none = 0;
  for (std::uint32_t c = 0; c < conversations; ++c) {
    auto b = open_ready(second, 200 + c, seqs[c].tokens, reused);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
    ASSERT_EQ(reused % kBlock, 0u);
    expect_rows(second, b->handle, seqs[c], reused);
    prefill(second, b->handle, seqs[c], reused, follow);  // outputs equal to the reference
    second.rt->finish(b->handle);
    (reused == 3 * kBlock ? full : reused > 0 ? partial : none) += 1;
  }
  std::printf("evicting store: %u follow-ups restored fully, %u partly, %u not at all\n", full, partial, none);
  EXPECT_GT(partial + none, 0u);
  EXPECT_GT(partial, 0u);  // a chain broken in the middle: its leading run restored, the rest prefilled
  EXPECT_EQ(second.tier->counters().misses.load() - misses_before, partial + none);
  EXPECT_EQ(second.rt->check(), nullptr);
}

// ---------------------------------------------------------------------------
// Restore into a reserved history: the reader writes, admission only adopts
// ---------------------------------------------------------------------------

// The first turn (26 tokens: 3 whole blocks) on `first`, written behind to the tier.
void first_turn(Server& first, const Sequence& s, std::uint32_t turn, std::uint64_t id) {
  std::uint32_t reused = 0;
  auto a = open_ready(first, id, std::span(s.tokens).first(turn), reused);
  ASSERT_TRUE(a.ok());
  prefill(first, a->handle, s, reused, turn);
  first.rt->finish_retaining(a->handle, std::span(s.tokens).first(turn));
  first.tier->drain();
}

// The history a lookup writes into (kNoSlot: none attached).
std::uint32_t reserved_slot(Server& sv) {
  for (std::uint32_t i = 0; i < sv.tier->lookups(); ++i) {
    if (sv.tier->lookup_at(i).phase() != tier::TierLookup::Phase::idle && sv.tier->lookup_at(i).slot() != tier::kNoSlot) {
      return sv.tier->lookup_at(i).slot();
    }
  }
  return tier::kNoSlot;
}

std::uint64_t copies(Server& sv) {
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < sv.tier->lookups(); ++i) n += sv.tier->lookup_at(i).copies();
  return n;
}

// Host rows [from, to) of history `slot` equal the rows the model writes for s (read from the
// host pool directly: the slot's context need not be running).
void expect_slot_rows(Server& sv, std::uint32_t slot, const Sequence& s, std::uint32_t from, std::uint32_t to) {
  const std::size_t row_floats = std::size_t{sv.g.kv_heads} * sv.g.head_dim;
  ReferenceKv encoded(sv.g, sv.q_heads, kPage);
  const std::uint32_t r = encoded.open();
  std::vector<float> k, v;
  const std::span<std::byte> host = sv.backend->host_pool();
  for (std::uint32_t l = 0; l < sv.g.dense_layers; ++l) {
    rows_of(s, l, 0, to, row_floats, k, v);
    encoded.append(r, l, k.data(), v.data(), to);
    for (std::uint32_t t = from; t < to; ++t) {
      ASSERT_EQ(std::memcmp(host.data() + sv.rt->plan().host.row_offset(slot, l, t), encoded.encoded_row(r, l, t).data(),
                            sv.g.row_bytes()),
                0)
          << "layer " << l << " token " << t;
    }
  }
}

// At the queue head a history is reserved and attached to the lookup; the reader writes the
// accepted rows into it before admission, which takes that history and copies nothing. The
// restored context's rows are bit-identical to a context that prefilled the same tokens.
TEST_F(TierRuntime, TheReaderWritesTheRowsIntoTheHistoryReservedForTheRequest) {
  Server first = make_server(redis.url());
  Server second = make_server(redis.url());
  Server plain = make_server("redis://127.0.0.1:1");  // nothing listens: every lookup a miss
  const Sequence conversation = sequence_of(30, 11);
  first_turn(first, conversation, 26, 1);
  ASSERT_EQ(first.tier->counters().writes.load(), 3u);

  EXPECT_FALSE(second.rt->prepare_tier(conversation.tokens));  // the lookup starts, a history is reserved
  EXPECT_EQ(second.rt->counters().tier_reservations, 1u);
  EXPECT_EQ(second.rt->histories_free(), 1u);  // the reserved one is neither free nor running
  const std::uint32_t slot = reserved_slot(second);
  ASSERT_NE(slot, tier::kNoSlot);
  for (int i = 0; i < 200 && !second.rt->prepare_tier(conversation.tokens); ++i) second.rt->wait_tier(50);
  EXPECT_EQ(copies(second), 1u);
  EXPECT_EQ(second.rt->histories_free(), 2u);  // the reader is done: free again, its rows kept for the request
  expect_slot_rows(second, slot, conversation, 0, 24);  // written by the reader, before admission

  std::uint32_t reused = 0;
  auto b = second.rt->open_context(2, kMaxContext, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(b->handle.slot, slot);  // admission adopted the reserved history
  EXPECT_EQ(reused, 24u);
  EXPECT_EQ(second.rt->counters().tier_restored_tokens, 24u);
  EXPECT_EQ(second.rt->counters().tier_reservations_lost, 0u);
  EXPECT_EQ(copies(second), 1u);  // admission copied nothing more
  prefill(second, b->handle, conversation, 24, 30);  // outputs equal to the reference

  auto c = plain.rt->open_context(3, kMaxContext, conversation.tokens, reused);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(reused, 0u);
  prefill(plain, c->handle, conversation, 0, 30);
  for (std::uint32_t l = 0; l < second.g.dense_layers; ++l) {
    for (std::uint32_t t = 0; t < 30; ++t) {
      ASSERT_EQ(std::memcmp(second.rt->host_row(b->handle, l, t).data(), plain.rt->host_row(c->handle, l, t).data(),
                            second.g.row_bytes()),
                0)
          << "layer " << l << " token " << t;
    }
  }
  second.rt->finish(b->handle);
  plain.rt->finish(c->handle);
  EXPECT_EQ(second.rt->check(), nullptr);
}

// A block whose payload was corrupted in the store, in the middle of the chain: the run the
// reader accepts ends before it, so the request adopts only block 0 and prefills the rest, with
// outputs equal to the reference; the refusal is counted.
TEST_F(TierRuntime, ACorruptedBlockMidChainEndsTheAdoptedRunThere) {
  Server first = make_server(redis.url());
  Server second = make_server(redis.url());
  const Sequence conversation = sequence_of(30, 12);
  first_turn(first, conversation, 26, 1);
  std::vector<std::uint64_t> chain(3);
  ASSERT_EQ(tier::tier_block_chain(std::span(conversation.tokens).first(24), kPage, kBlock, 77, chain), 3u);
  const std::string key1 = tier::tier_block_key(77, second.g, chain[1]);
  redis.command("SETRANGE " + key1 + " 100 XYZ");
  ASSERT_EQ(redis.command("GETRANGE " + key1 + " 100 102"), "XYZ");  // a payload byte range (the header is 64)

  std::uint32_t reused = 0;
  auto b = open_ready(second, 2, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 8u);  // block 0 only: block 1 was refused, block 2 (intact) is after it
  EXPECT_EQ(second.tier->counters().hits.load(), 1u);
  EXPECT_EQ(second.tier->counters().refused.load(), 1u);
  EXPECT_EQ(second.tier->counters().misses.load(), 1u);
  EXPECT_EQ(second.rt->length(b->handle), 8u);
  prefill(second, b->handle, conversation, 8, 30);
  expect_rows(second, b->handle, conversation, 30);
  second.rt->finish(b->handle);
  EXPECT_EQ(second.rt->check(), nullptr);
}

// A request cancelled while the reader works on its reserved history (the store stalled: the
// read waits out its timeout): the history stays held until the reader is out of it, then goes
// back to the free list; nothing is lost — the same follow-up later restores every block. A
// runtime shut down while a reader holds a reserved history waits for it (no write after free).
TEST_F(TierRuntime, ACancelDuringTheLookupGivesTheHistoryBackOnceTheReaderIsDone) {
  Server first = make_server(redis.url());
  Server second = make_server(redis.url());
  const Sequence conversation = sequence_of(30, 13);
  first_turn(first, conversation, 26, 1);

  redis.pause();
  EXPECT_FALSE(second.rt->prepare_tier(conversation.tokens));
  const std::uint32_t slot = reserved_slot(second);
  ASSERT_NE(slot, tier::kNoSlot);
  second.rt->drop_tier(conversation.tokens);  // cancelled at the head
  EXPECT_TRUE(second.tier->writing_into(slot));
  EXPECT_EQ(second.rt->release_tier_leases(), 1u);  // still held: the reader may write into it
  EXPECT_EQ(second.rt->histories_free(), 1u);
  for (int i = 0; i < 100 && second.tier->writing_into(slot); ++i) second.rt->wait_tier(50);
  EXPECT_FALSE(second.tier->writing_into(slot));
  EXPECT_EQ(second.rt->release_tier_leases(), 0u);
  EXPECT_EQ(second.rt->histories_free(), 2u);
  EXPECT_EQ(reserved_slot(second), tier::kNoSlot);  // the abandoned lookup is idle
  EXPECT_EQ(second.rt->check(), nullptr);
  redis.resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the failed connection's back-off (50 ms)

  std::uint32_t reused = 0;
  auto b = open_ready(second, 2, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reused, 24u);
  expect_rows(second, b->handle, conversation, 24);
  prefill(second, b->handle, conversation, 24, 30);
  second.rt->finish(b->handle);

  {
    Server third = make_server(redis.url());
    redis.pause();
    EXPECT_FALSE(third.rt->prepare_tier(conversation.tokens));
    EXPECT_NE(reserved_slot(third), tier::kNoSlot);
  }  // ~Server drains the tier (lets the lookup go, waits for its reader) before the host pool goes
  redis.resume();
  EXPECT_EQ(second.rt->check(), nullptr);
}

// Queued requests' lookups start while they wait (one reader each, bounded by kv_tier.lookups: a
// third is refused until one is free), without a history; at the head each gets a history, the
// reader writes the rows it already read, and no block is read twice.
TEST_F(TierRuntime, QueuedRequestsAreLookedUpWhileTheyWait) {
  Server first = make_server(redis.url());
  Server second = make_server(redis.url());
  const Sequence one = sequence_of(30, 14), two = sequence_of(30, 15), three = sequence_of(30, 16);
  first_turn(first, one, 26, 1);
  first_turn(first, two, 26, 2);
  ASSERT_EQ(second.tier->lookups(), 2u);

  EXPECT_TRUE(second.rt->prefetch_tier(one.tokens));
  EXPECT_TRUE(second.rt->prefetch_tier(two.tokens));
  EXPECT_EQ(second.rt->histories_free(), 2u);  // nothing reserved for a queued request
  for (std::uint32_t i = 0; i < 2; ++i) {
    for (int w = 0; w < 100 && second.tier->lookup_at(i).phase() != tier::TierLookup::Phase::read; ++w) {
      second.tier->lookup_at(i).wait(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(second.tier->lookup_at(i).phase(), tier::TierLookup::Phase::read);
  }
  EXPECT_EQ(second.tier->counters().hits.load(), 6u);  // both read before either reached the head
  EXPECT_FALSE(second.rt->prefetch_tier(three.tokens));  // every reader holds a read: refused, asked again later
  EXPECT_TRUE(second.rt->prefetch_tier(one.tokens));     // already looked up

  std::uint32_t reused = 0;
  auto a = open_ready(second, 2, one.tokens, reused);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reused, 24u);
  auto b = open_ready(second, 3, two.tokens, reused);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reused, 24u);
  EXPECT_EQ(second.tier->lookup_at(0).finished() + second.tier->lookup_at(1).finished(), 2u);  // no read twice
  EXPECT_EQ(copies(second), 2u);
  EXPECT_EQ(second.rt->counters().tier_reservations, 2u);
  expect_rows(second, a->handle, one, 24);
  expect_rows(second, b->handle, two, 24);
  prefill(second, a->handle, one, 24, 30);
  prefill(second, b->handle, two, 24, 30);
  second.rt->finish(a->handle);
  second.rt->finish(b->handle);
  EXPECT_EQ(second.rt->check(), nullptr);
}

TEST(RedisTierSettings, ABlockThatIsNotWholePagesIsRefusedByName) {
  tier::RedisTierSettings ts;
  ts.store.host = "127.0.0.1";
  ts.block_tokens = 6;
  ts.page_tokens = 4;
  ts.max_context_tokens = 64;
  ts.geometry = geometry();
  auto t = tier::RedisTier::create(ts);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().setting, "kv_tier.block_tokens");
  ts.block_tokens = 128;
  EXPECT_FALSE(tier::RedisTier::create(ts).ok());
}

}  // namespace
}  // namespace activekv
