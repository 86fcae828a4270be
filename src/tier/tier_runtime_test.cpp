// tier_runtime_test.cpp — two KV runtimes ("two servers") sharing one Redis through RedisTier.
//
// The rows are a function of the tokens before them, as a model's are (the same
// construction as runtime/prefix_reuse_test.cpp): a context that restores a
// prefix from the tier must hold exactly the rows it would have written itself,
// and its attention outputs must match the contiguous reference.
//
// The restore into a reserved history (the reader writes, admission only adopts) is in
// tier_reserved_restore_test.cpp; the shared servers and rows in tier_runtime_fixture.hpp.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tier/tier_runtime_fixture.hpp"

namespace activekv::tier_test {
namespace {

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

// The host prefix cache is the first level and Redis the second: a prompt whose retained history
// was taken and whose cache pages were evicted (least recently used) by later prompts is found
// again in the tier, restored whole-block by whole-block, with the rows it would have written.
TEST_F(TierRuntime, APromptEvictedFromTheLocalPrefixCacheIsFoundAgainInTheTier) {
  // One history, no retained allowance, a cache of 6 pages: one 25-token prompt's full pages fill it.
  Server sv = make_server(redis.url(), 1, geometry(), /*cache_pages=*/6);
  ASSERT_EQ(sv.rt->counters().prefix_cache_pages_total, 6u);
  const Sequence first = sequence_of(25, 11);  // 6 full pages (3 whole blocks) + 1 token
  std::uint32_t reused = 99;
  auto a = open_ready(sv, 1, first.tokens, reused);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reused, 0u);
  prefill(sv, a->handle, first, 0, 25);
  sv.rt->finish_retaining(a->handle, first.tokens);
  sv.tier->drain();
  EXPECT_EQ(sv.rt->counters().prefix_cache_pages, 6u);
  EXPECT_EQ(sv.tier->counters().writes.load(), 3u);
  // Two other prompts take the only history in turn and push every page of the first out of the cache.
  for (std::uint64_t seed : {12u, 13u}) {
    const Sequence other = sequence_of(25, seed);
    auto b = open_ready(sv, seed, other.tokens, reused);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
    EXPECT_EQ(reused, 0u);
    prefill(sv, b->handle, other, 0, 25);
    sv.rt->finish_retaining(b->handle, other.tokens);
    sv.tier->drain();
  }
  EXPECT_EQ(sv.rt->counters().prefix_cache_evictions, 12u);
  EXPECT_EQ(sv.rt->counters().retained_dropped, 2u);
  EXPECT_EQ(sv.tier->counters().writes.load(), 9u);
  // The first prompt again: nothing local holds it (its history was taken, its cache pages evicted);
  // the tier holds its 3 blocks, so 24 tokens are restored from Redis and only the last is prefilled.
  const KvCounters before = sv.rt->counters();
  auto c = open_ready(sv, 4, first.tokens, reused);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 24u);
  EXPECT_EQ(sv.rt->counters().prefix_cache_hit_tokens, before.prefix_cache_hit_tokens) << "a local miss";
  EXPECT_EQ(sv.rt->counters().prefix_cache_lookups, before.prefix_cache_lookups + 1);
  EXPECT_EQ(sv.rt->counters().prefix_reused_tokens, before.prefix_reused_tokens);
  EXPECT_EQ(sv.rt->counters().tier_restored_tokens, before.tier_restored_tokens + 24);
  expect_rows(sv, c->handle, first, 24);
  prefill(sv, c->handle, first, 24, 25);  // attention over all 25 rows checked against the reference
  sv.rt->finish(c->handle);
  EXPECT_EQ(sv.rt->check(), nullptr);
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
}  // namespace activekv::tier_test