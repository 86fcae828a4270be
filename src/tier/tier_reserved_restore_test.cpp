// tier_reserved_restore_test.cpp — restore into a reserved history: at the queue head a history is
// reserved for the request and attached to its tier lookup; the reader writes the accepted rows
// into it before admission, which only adopts them (no copy). Also: a corrupted block ends the
// adopted run, a cancel during the lookup gives the history back once the reader is done, and
// queued requests are looked up while they wait.
//
// Invariant checked: the restored rows are bit-identical to the rows a context that prefilled the
// same tokens holds, and every history reserved for a lookup comes back exactly once.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tier/tier_runtime_fixture.hpp"

namespace activekv::tier_test {
namespace {

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

}  // namespace
}  // namespace activekv::tier_test
