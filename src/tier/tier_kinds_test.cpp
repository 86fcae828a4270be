// tier_kinds_test.cpp — the shared KV tier for window-layer models and hybrids (docs/TIER.md, "Window
// layers and hybrids"): two KV runtimes ("two servers") sharing one redis-server through RedisTier.
//
// Window layers keep a host ring (memory_plan.hpp): a block carries their rows only for the tokens
// the writer's ring still held, and a restore ends only where every window row a query there reads
// came with it (the ring cut). A hybrid's block carries the recurrent state at its end where the
// writer held a checkpoint, and a restore ends only on such a block (the state cut); that state is
// restored into the context's recurrent slot. Rows are a function of the tokens before them (the
// fixture's construction), the toy recurrence folds every token into every state word
// (recurrent_state_test.cpp's), so any lost, stale or misplaced byte shows: every follow-up's
// attention outputs and final state equal a runtime without reuse, byte for byte.
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "activekv/decision_log.hpp"

#include "testing/alloc_counter.hpp"
#include "tier/tier_runtime_fixture.hpp"
#include "tier/tier_block.hpp"
#include "tier/tier_store.hpp"

namespace activekv::tier_test {
namespace {

constexpr std::uint32_t kWindow = 8;         // a ring of (2 + 1) × 4 = 12 rows
constexpr std::uint64_t kStateBytes = 96;    // 12 words: a toy recurrent state

Geometry window_geometry() {
  Geometry g = geometry();  // 2 dense layers
  g.kinds.window_tokens = kWindow;
  g.kinds.set_window(0);    // layer 0 a window layer, layer 1 a full one
  return g;
}

Geometry hybrid_geometry() {
  Geometry g = geometry();
  g.recurrent_layers = 1;
  g.recurrent_state_bytes = kStateBytes;
  return g;
}

void fold(std::span<std::byte> state, std::int32_t token, std::uint32_t position) {
  for (std::size_t i = 0; i < state.size() / 8; ++i) {
    std::uint64_t w;
    std::memcpy(&w, state.data() + 8 * i, 8);
    w = mix(w ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(token)) << 20) ^ position ^ (i << 56));
    std::memcpy(state.data() + 8 * i, &w, 8);
  }
}

// tier_runtime_fixture.hpp's server; a hybrid checkpoints at every block end unless told otherwise.
Server make_kinds_server(const std::string& url, const Geometry& g, std::uint32_t histories = 2,
                         std::uint32_t checkpoint_pages = kBlock / kPage, std::uint32_t cache_pages = 0) {
  return make_server(url, histories, g, cache_pages, checkpoint_pages);
}

// What a run of tokens [from, to) gives: every layer's attention outputs, then (hybrids) the state after it.
struct Output {
  std::vector<float> attention;
  std::vector<std::byte> state;
};

// Feeds tokens [from, to) of s to c in chunks of at most `chunk` tokens (the chunking starts at
// `from`). With `offer`, as the serving engine does: each chunk also ends where tokens_to_checkpoint()
// says (a window-layer model's tier block ends), and offer_running() follows every step.
Output run(Server& sv, ContextId c, const Sequence& s, std::uint32_t from, std::uint32_t to, bool offer = false,
           std::uint32_t chunk = 2 * kPage) {
  Output o;
  const std::size_t row_floats = std::size_t{sv.g.kv_heads} * sv.g.head_dim;
  const std::size_t qe = std::size_t{sv.q_heads} * sv.g.head_dim;
  std::vector<float> k, v;
  for (std::uint32_t at = from; at < to;) {
    const std::uint32_t n = std::min({chunk, to - at, offer ? sv.rt->tokens_to_checkpoint(c) : UINT32_MAX});
    const StepEntry e{c, n};
    EXPECT_TRUE(sv.rt->begin_step({&e, 1}).ok());
    std::vector<float> q(n * qe), out(n * qe);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(mix(i + at * 77) % 1000) / 1000.0f - 0.5f;
    for (std::uint32_t l = 0; l < sv.g.dense_layers; ++l) {
      rows_of(s, l, at, n, row_floats, k, v);
      EXPECT_TRUE(sv.rt->write_kv(l, k.data(), v.data()).ok());
      EXPECT_TRUE(sv.rt->attend(l, q.data(), out.data()).ok());
      o.attention.insert(o.attention.end(), out.begin(), out.end());
    }
    if (sv.g.recurrent_state_bytes != 0) {
      auto state = sv.rt->recurrent_state(c);
      EXPECT_TRUE(state.ok());
      for (std::uint32_t p = at; p < at + n; ++p) fold(*state, s.tokens[p], p);
      if (at + n >= to) o.state.assign(state->begin(), state->end());
    }
    EXPECT_TRUE(sv.rt->end_step().ok());
    at += n;
    if (offer) {
      const std::uint64_t before = testing::heap_allocations_outside_io();
      sv.rt->offer_running(c, std::span(s.tokens).first(at));  // copies ring rows: no allocation
      EXPECT_EQ(testing::heap_allocations_outside_io(), before) << "offer_running allocated";
    }
  }
  return o;
}

// The same tokens on a runtime without reuse: [0, from) fed first, then [from, to) compared.
Output without_reuse(const Geometry& g, const Sequence& s, std::uint32_t from, std::uint32_t to) {
  Server off = make_kinds_server("", g, 1);
  std::uint32_t none = 99;
  auto c = off.rt->open_context(1, kMaxContext, std::span(s.tokens).first(to), none);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(none, 0u);
  if (from > 0) run(off, c->handle, s, 0, from);
  Output o = run(off, c->handle, s, from, to);
  off.rt->finish(c->handle);
  return o;
}

void expect_equal(const Output& got, const Output& want, const std::string& what) {
  ASSERT_EQ(got.attention.size(), want.attention.size()) << what;
  ASSERT_FALSE(got.attention.empty()) << what;
  EXPECT_EQ(std::memcmp(got.attention.data(), want.attention.data(), got.attention.size() * sizeof(float)), 0)
      << what << ": attention outputs";
  ASSERT_EQ(got.state.size(), want.state.size()) << what;
  if (!got.state.empty()) {  // a model without recurrent layers has none (memcmp must not see a null pointer)
    EXPECT_EQ(std::memcmp(got.state.data(), want.state.data(), got.state.size()), 0) << what << ": recurrent state";
  }
}

// One turn on `sv`: admitted (the tier looked up first), the rest fed, finished with retention, written behind.
std::uint32_t turn(Server& sv, std::uint64_t id, const Sequence& s, std::uint32_t n, Output* out = nullptr) {
  std::uint32_t reused = 99;
  auto c = open_ready(sv, id, std::span(s.tokens).first(n), reused);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c->outcome, AdmitOutcome::admitted);
  Output o = run(sv, c->handle, s, reused, n);
  if (out != nullptr) *out = std::move(o);
  sv.rt->finish_retaining(c->handle, std::span(s.tokens).first(n));
  sv.tier->drain();
  return reused;
}

std::uint32_t count_logged(const KvRuntime& rt, Reason reason) {
  std::uint32_t n = 0;
  const DecisionLog& log = rt.decision_log();
  for (std::uint32_t i = 0; i < log.size(); ++i) n += log.at(i).kind == DecisionKind::adopt && log.at(i).reason == reason ? 1u : 0u;
  return n;
}

class TierKinds : public TierRuntime {};

// Layer 0's ring holds 12 rows. A 20-token first turn leaves tokens 8..19 in it: block 1 (8..15)
// carries every window row, block 0 none. The follow-up on the second server (30 tokens) restores
// both blocks: a query at 16 reads window pages 2..3 (tokens 8..15), all in block 1, written into
// the ring's slots (t mod 12). Its outputs equal a runtime without reuse, byte for byte.
TEST_F(TierKinds, AWindowLayerFollowUpOnAnotherServerRestoresTheRingAndEqualsNoReuse) {
  Server first = make_kinds_server(redis.url(), window_geometry());
  Server second = make_kinds_server(redis.url(), window_geometry());
  ASSERT_NE(first.rt, nullptr);
  ASSERT_EQ(first.rt->plan().host.ring_tokens, 12u);
  ASSERT_EQ(first.tier->ring_tokens(), 12u);
  const Sequence conversation = sequence_of(30, 21);
  EXPECT_EQ(turn(first, 1, conversation, 20), 0u);
  EXPECT_EQ(first.tier->counters().writes.load(), 2u);
  // Block 0 without window rows, block 1 with all of them.
  EXPECT_EQ(first.tier->counters().bytes_written.load(),
            tier::tier_block_bytes(first.g, kBlock, {kBlock, false}) + tier::tier_block_bytes(first.g, kBlock, {0, false}));

  std::uint32_t reused = 99;
  auto b = open_ready(second, 2, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 16u);
  EXPECT_EQ(second.rt->counters().tier_restores, 1u);
  EXPECT_EQ(second.rt->counters().tier_restored_tokens, 16u);
  EXPECT_EQ(second.rt->counters().tier_ring_cuts, 0u);
  // The full layer holds rows 0..15, the window layer rows 8..15 at their ring slots.
  const std::size_t row_floats = std::size_t{second.g.kv_heads} * second.g.head_dim;
  ReferenceKv encoded(second.g, second.q_heads, kPage);
  const std::uint32_t r = encoded.open();
  std::vector<float> k, v;
  const HostPoolPlan& host = second.rt->plan().host;
  for (std::uint32_t l = 0; l < 2; ++l) {
    rows_of(conversation, l, 0, 16, row_floats, k, v);
    encoded.append(r, l, k.data(), v.data(), 16);
    for (std::uint32_t t = l == 0 ? 8 : 0; t < 16; ++t) {
      const std::span<const std::byte> row = second.rt->host_row(b->handle, l, t);
      ASSERT_EQ(std::memcmp(row.data(), encoded.encoded_row(r, l, t).data(), second.g.row_bytes()), 0) << "layer " << l << " token " << t;
      EXPECT_EQ(static_cast<std::uint64_t>(row.data() - second.backend->host_pool().data()),
                host.segment_offset(b->handle.slot, l) + std::uint64_t{l == 0 ? t % 12 : t} * second.g.row_bytes());
    }
  }
  const std::string text = explanation_text(second.rt->explain(b->handle));
  EXPECT_NE(text.find("into their host rings (token t at slot t mod 12)"), std::string::npos) << text;
  const Output got = run(second, b->handle, conversation, 16, 30);
  second.rt->finish(b->handle);
  expect_equal(got, without_reuse(window_geometry(), conversation, 16, 30), "window follow-up");
  EXPECT_EQ(second.rt->counters().heap_allocations_in_steps, 0u);
  EXPECT_EQ(second.rt->check(), nullptr);
}

// A 22-token first turn leaves tokens 10..21 in the ring: block 1 carries window rows from token 10
// only, but a query at 16 reads tokens 8..15; and block 0 carries none. The run is cut back to nothing
// (counted, logged, explained) and the whole prompt prefilled: outputs equal no reuse.
TEST_F(TierKinds, AWindowTheBlocksDoNotCoverIsCutAndRecomputed) {
  Server first = make_kinds_server(redis.url(), window_geometry());
  Server second = make_kinds_server(redis.url(), window_geometry());
  const Sequence conversation = sequence_of(30, 22);
  turn(first, 1, conversation, 22);
  EXPECT_EQ(first.tier->counters().writes.load(), 2u);
  std::uint32_t reused = 99;
  auto b = open_ready(second, 2, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reused, 0u) << "cut back to nothing";
  const std::string text = explanation_text(second.rt->explain(b->handle));
  EXPECT_NE(text.find("shared KV tier: 4 more accepted page(s) not restored: the window layers' rows"), std::string::npos)
      << text;
  EXPECT_EQ(count_logged(*second.rt, Reason::tier_ring_cut), 1u);
  const Output got = run(second, b->handle, conversation, 0, 30);
  second.rt->finish(b->handle);
  EXPECT_EQ(second.tier->counters().hits.load(), 2u) << "both blocks were read and accepted";
  EXPECT_EQ(second.rt->counters().tier_ring_cuts, 1u);
  EXPECT_EQ(second.rt->counters().tier_ring_cut_tokens, 16u);
  EXPECT_EQ(second.rt->counters().tier_restores, 0u);
  expect_equal(got, without_reuse(window_geometry(), conversation, 0, 30), "cut window follow-up");
  EXPECT_NE(std::string(reason_text(Reason::tier_ring_cut)).find("cut back"), std::string::npos);
  EXPECT_EQ(std::string(reason_name(Reason::tier_ring_cut)), "tier_ring_cut");
  EXPECT_EQ(second.rt->check(), nullptr);
}

// A hybrid: the first turn's checkpoints at tokens 8 and 16 (every 2 pages) go with blocks 0 and 1.
// The follow-up on the second server restores 16 tokens and the state at 16 into its recurrent slot:
// its outputs and final state equal no reuse.
TEST_F(TierKinds, AHybridFollowUpOnAnotherServerRestoresTheStateAtTheBlockEndAndEqualsNoReuse) {
  Server first = make_kinds_server(redis.url(), hybrid_geometry());
  Server second = make_kinds_server(redis.url(), hybrid_geometry());
  ASSERT_NE(first.rt, nullptr);
  ASSERT_TRUE(first.rt->plan().state.enabled());
  const Sequence conversation = sequence_of(30, 23);
  EXPECT_EQ(turn(first, 1, conversation, 22), 0u);
  EXPECT_EQ(first.tier->counters().writes.load(), 2u);
  EXPECT_EQ(first.tier->counters().bytes_written.load(), 2 * tier::tier_block_bytes_max(first.g, kBlock))
      << "both blocks carry their state";
  std::uint32_t reused = 99;
  auto b = open_ready(second, 2, conversation.tokens, reused);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 16u);
  EXPECT_EQ(second.rt->counters().tier_restored_tokens, 16u);
  EXPECT_EQ(second.rt->counters().tier_state_cuts, 0u);
  const Output got = run(second, b->handle, conversation, 16, 30);
  second.rt->finish(b->handle);
  expect_equal(got, without_reuse(hybrid_geometry(), conversation, 16, 30), "hybrid follow-up");
  EXPECT_EQ(second.rt->counters().heap_allocations_in_steps, 0u);
  EXPECT_EQ(second.rt->check(), nullptr);
}

// The local prefix comes from the host prefix cache, the rest from the tier: the cache's restore
// writes its window pages into the ring at admission (tokens 8..15: slots 8..11 and 0..3), the same
// slots the tier's window rows of tokens 24..27 take; the tier's rows are written last, at
// adoption, so the ring holds what a query at 32 reads. One history, so the follow-up cannot adopt
// the retained one in place (a stranger took it): outputs equal no reuse.
TEST_F(TierKinds, AWindowRestoredPastAPrefixFromTheHostCacheKeepsTheTiersRingRows) {
  Server first = make_kinds_server(redis.url(), window_geometry());
  Server second = make_kinds_server(redis.url(), window_geometry(), 1, kBlock / kPage, /*cache_pages=*/16);
  ASSERT_NE(second.rt, nullptr);
  const Sequence s = sequence_of(40, 28);
  turn(first, 1, s, 36);  // blocks 0..3; its ring held 24..35: block 3 carries every window row
  turn(second, 2, s, 17);  // the cache: pages 0..3, window rows of pages 2..3
  const Sequence stranger = sequence_of(9, 29);
  turn(second, 3, stranger, 9);  // takes the only history: the retained prefix is gone
  ASSERT_EQ(second.rt->counters().prefix_cache_pages, 6u);
  std::uint32_t reused = 99;
  auto b = open_ready(second, 4, s.tokens, reused);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
  EXPECT_EQ(reused, 32u);
  EXPECT_EQ(second.rt->counters().prefix_cache_hit_tokens, 16u) << "pages 0..3 from the cache";
  EXPECT_EQ(second.rt->counters().tier_restored_tokens, 16u) << "tokens 16..31 from the tier";
  const Output got = run(second, b->handle, s, 32, 40);
  second.rt->finish(b->handle);
  expect_equal(got, without_reuse(window_geometry(), s, 32, 40), "cache then tier");
  EXPECT_EQ(second.rt->check(), nullptr);
}

// Checkpoints only at the newest page boundary and the prompt's (no periodic ones): a 30-token turn
// fed 8 tokens a step leaves its state at 24 only, so of the blocks 0..2 written only block 2 carries
// one. A prompt sharing 20 tokens finds blocks 0 and 1 (block 2 differs), neither with a state: the
// run is cut back to nothing (counted, logged, explained) and prefilled, equal to no reuse.
TEST_F(TierKinds, AHybridRunWithoutAStateAtItsEndIsCutAndRecomputed) {
  Server first = make_kinds_server(redis.url(), hybrid_geometry(), 2, /*checkpoint_pages=*/0);
  Server second = make_kinds_server(redis.url(), hybrid_geometry(), 2, 0);
  const Sequence conversation = sequence_of(30, 25);
  turn(first, 1, conversation, 30);
  EXPECT_EQ(first.tier->counters().writes.load(), 3u);
  EXPECT_EQ(first.tier->counters().bytes_written.load(),
            2 * tier::tier_block_bytes(first.g, kBlock) + tier::tier_block_bytes_max(first.g, kBlock))
      << "only block 2 carries its state";
  Sequence other;
  for (std::uint32_t t = 0; t < 20; ++t) other.push(conversation.tokens[t]);
  for (std::int32_t t : sequence_of(12, 26).tokens) other.push(t);
  std::uint32_t reused = 99;
  auto b = open_ready(second, 2, other.tokens, reused);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(reused, 0u);
  const std::string text = explanation_text(second.rt->explain(b->handle));
  EXPECT_NE(text.find("shared KV tier: 4 more accepted page(s) not restored: no block past the restored end carries "
                      "the recurrent state"),
            std::string::npos)
      << text;
  EXPECT_EQ(count_logged(*second.rt, Reason::tier_state_cut), 1u);
  Output got = run(second, b->handle, other, 0, 32);
  second.rt->finish_retaining(b->handle, other.tokens);
  second.tier->drain();
  EXPECT_EQ(second.tier->counters().hits.load(), 2u);
  EXPECT_EQ(second.rt->counters().tier_state_cuts, 1u);
  EXPECT_EQ(second.rt->counters().tier_state_cut_tokens, 16u);
  EXPECT_EQ(second.rt->counters().tier_ring_cuts, 0u);
  EXPECT_EQ(second.rt->counters().tier_restores, 0u);
  expect_equal(got, without_reuse(hybrid_geometry(), other, 0, 32), "state-cut follow-up");
  // The follow-up of the whole turn ends on block 2: 24 tokens and the state at 24.
  Sequence longer = conversation;
  for (std::int32_t t : sequence_of(6, 27).tokens) longer.push(t);
  EXPECT_EQ(turn(second, 3, longer, 36, &got), 24u);
  expect_equal(got, without_reuse(hybrid_geometry(), longer, 24, 36), "follow-up on the block with a state");
  EXPECT_EQ(second.rt->check(), nullptr);
}

// A corrupted block 1 (a flipped state byte) and a short one are misses: the run ends before them,
// counted as refused, and the follow-up restores block 0 only (state at 8) — equal to no reuse.
TEST_F(TierKinds, ACorruptedOrShortBlockIsAMissAndTheRestoreEndsBeforeIt) {
  for (const bool shorten : {false, true}) {
    ASSERT_NE(redis.command("FLUSHALL"), "");
    Server first = make_kinds_server(redis.url(), hybrid_geometry());
    Server second = make_kinds_server(redis.url(), hybrid_geometry());
    const Sequence conversation = sequence_of(30, 24);
    turn(first, 1, conversation, 22);
    std::uint64_t chain[2];
    ASSERT_EQ(tier::tier_block_chain(std::span(conversation.tokens).first(16), kPage, kBlock, 77, chain), 2u);
    const std::string key = tier::tier_block_key(77, first.g, chain[1]);
    tier::TierCounters counters;
    auto config = tier::parse_tier_url(redis.url(), "test");
    tier::TierStore store(config.value(), &counters);
    std::vector<std::string> values;
    const std::string keys[1] = {key};
    ASSERT_EQ(store.get_chain(keys, values), 1u);
    std::string damaged = values[0];
    if (shorten) {
      damaged.resize(damaged.size() - 8);
    } else {
      damaged.back() = static_cast<char>(damaged.back() ^ 0x40);
    }
    ASSERT_TRUE(store.put(key, std::as_bytes(std::span(damaged.data(), damaged.size()))));

    std::uint32_t reused = 99;
    auto b = open_ready(second, 2, conversation.tokens, reused);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(reused, 8u) << (shorten ? "short" : "corrupted");
    EXPECT_EQ(second.tier->counters().refused.load(), 1u);
    EXPECT_EQ(second.tier->counters().hits.load(), 1u);
    const Output got = run(second, b->handle, conversation, 8, 30);
    second.rt->finish(b->handle);
    expect_equal(got, without_reuse(hybrid_geometry(), conversation, 8, 30), shorten ? "short block" : "corrupted block");
    EXPECT_EQ(second.rt->check(), nullptr);
  }
}

// Written while running (docs/TIER.md): a 48-token history fed 6 tokens a step, each chunk ending at
// a block end where tokens_to_checkpoint() says, and offer_running() after every step, writes each of
// its six blocks whole (every window row) when it reaches the block's end. The writer is paused
// meanwhile, so the ring (12 rows) is rewritten many times before it encodes a block: the blocks'
// window rows must be the copies taken at the offer. The context then leaves without retention while
// the writes wait: its history is held until they end. A prompt on a second server sharing only the
// first 16 tokens restores blocks 0 and 1 (no ring cut) and equals no reuse byte for byte. Without
// the offers while running (the same history written at finish only) the same prompt restores nothing.
TEST_F(TierKinds, AnEarlyBlockWrittenWhileALongHistoryRunsIsRestoredForAPromptSharingOnlyThatPart) {
  const Sequence conversation = sequence_of(48, 41);
  Sequence other;
  for (std::uint32_t t = 0; t < 16; ++t) other.push(conversation.tokens[t]);
  for (std::int32_t t : sequence_of(14, 42).tokens) other.push(t);
  for (const bool while_running : {true, false}) {
    ASSERT_NE(redis.command("FLUSHALL"), "");
    Server first = make_kinds_server(redis.url(), window_geometry());
    Server second = make_kinds_server(redis.url(), window_geometry());
    ASSERT_NE(first.rt, nullptr);
    std::uint32_t reused = 99;
    auto a = open_ready(first, 1, conversation.tokens, reused);
    ASSERT_TRUE(a.ok());
    ASSERT_EQ(reused, 0u);
    if (while_running) {
      EXPECT_EQ(first.rt->tokens_to_checkpoint(a->handle), kBlock) << "a chunk ends at the first block's end";
      first.tier->writer().pause(true);
      run(first, a->handle, conversation, 0, 48, /*offer=*/true, /*chunk=*/6);
      EXPECT_EQ(first.rt->counters().tier_running_offers, 6u);
      EXPECT_EQ(first.tier->writer().queued(), 6u);
      const std::uint32_t free_before = first.rt->histories_free();
      first.rt->finish(a->handle);  // no retention, no offer at finish: the queued writes still read its rows
      EXPECT_EQ(first.rt->histories_free(), free_before) << "the history stays held while the writer reads it";
      first.tier->writer().pause(false);
      first.tier->drain();
      first.rt->release_tier_leases();
      EXPECT_EQ(first.rt->histories_free(), free_before + 1);
      EXPECT_EQ(first.tier->counters().writes.load(), 6u);
      EXPECT_EQ(first.tier->counters().bytes_written.load(), 6 * tier::tier_block_bytes(first.g, kBlock, {0, false}))
          << "every block carries every window row";
    } else {
      run(first, a->handle, conversation, 0, 48);
      first.rt->finish_retaining(a->handle, conversation.tokens);
      first.tier->drain();
      EXPECT_EQ(first.rt->counters().tier_running_offers, 0u);
    }
    EXPECT_EQ(first.rt->counters().heap_allocations_in_steps, 0u);

    reused = 99;
    auto b = open_ready(second, 2, other.tokens, reused);
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(b->outcome, AdmitOutcome::admitted);
    EXPECT_EQ(second.tier->counters().hits.load(), 2u) << "blocks 0 and 1 are in the tier either way";
    if (while_running) {
      EXPECT_EQ(reused, 16u);
      EXPECT_EQ(second.rt->counters().tier_restored_tokens, 16u);
      EXPECT_EQ(second.rt->counters().tier_ring_cuts, 0u);
    } else {
      EXPECT_EQ(reused, 0u) << "written at finish, blocks 0 and 1 carry no window rows: cut";
      EXPECT_EQ(second.rt->counters().tier_ring_cuts, 1u);
    }
    const Output got = run(second, b->handle, other, reused, 30);
    second.rt->finish(b->handle);
    expect_equal(got, without_reuse(window_geometry(), other, reused, 30),
                 while_running ? "restored from blocks written while running" : "cut");
    EXPECT_EQ(second.rt->counters().heap_allocations_in_steps, 0u);
    EXPECT_EQ(first.rt->check(), nullptr);
    EXPECT_EQ(second.rt->check(), nullptr);
  }
}

// The rule under one key (docs/TIER.md, "Written while running"): a block lacking window rows is
// written with SET NX. A history that computed the same 24 tokens itself (no tier lookup) and wrote
// them at finish has blocks 0 and 1 without all their window rows: where a running history already
// stored them whole, they are kept (counted), and the stored values stay whole; in the other order
// the whole blocks replace the partial ones. Either way a follow-up restores 16 tokens.
TEST_F(TierKinds, ALessCompleteBlockNeverReplacesAWholeOneUnderTheSameKey) {
  const Sequence conversation = sequence_of(24, 43);
  std::uint64_t chain[3];
  ASSERT_EQ(tier::tier_block_chain(conversation.tokens, kPage, kBlock, 77, chain), 3u);
  const std::string keys[3] = {tier::tier_block_key(77, window_geometry(), chain[0]),
                               tier::tier_block_key(77, window_geometry(), chain[1]),
                               tier::tier_block_key(77, window_geometry(), chain[2])};
  const std::uint64_t whole = tier::tier_block_bytes(window_geometry(), kBlock, {0, false});
  auto stored_sizes = [&] {
    tier::TierCounters counters;
    tier::TierStore store(tier::parse_tier_url(redis.url(), "test").value(), &counters);
    std::vector<std::string> values;
    EXPECT_EQ(store.get_chain(keys, values), 3u);
    std::vector<std::uint64_t> sizes;
    for (std::size_t i = 0; i < 3 && i < values.size(); ++i) sizes.push_back(values[i].size());
    return sizes;
  };
  // Running: every block whole, written as the history reaches its end.
  auto write_running = [&](Server& sv) {
    std::uint32_t reused = 99;
    auto c = sv.rt->open_context(1, kMaxContext, conversation.tokens, reused);  // no lookup: computes every row
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(reused, 0u);
    run(sv, c->handle, conversation, 0, 24, /*offer=*/true);
    sv.rt->finish_retaining(c->handle, conversation.tokens);
    sv.tier->drain();
  };
  // At finish only: the ring holds tokens 12..23, so block 0 carries no window row, block 1 rows 12..15.
  auto write_at_finish = [&](Server& sv) {
    std::uint32_t reused = 99;
    auto c = sv.rt->open_context(2, kMaxContext, conversation.tokens, reused);
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(reused, 0u);
    run(sv, c->handle, conversation, 0, 24);
    sv.rt->finish_retaining(c->handle, conversation.tokens);
    sv.tier->drain();
  };
  for (const bool whole_first : {true, false}) {
    ASSERT_NE(redis.command("FLUSHALL"), "");
    Server running = make_kinds_server(redis.url(), window_geometry());
    Server finishing = make_kinds_server(redis.url(), window_geometry());
    if (whole_first) {
      write_running(running);
      EXPECT_EQ(running.tier->counters().writes.load(), 3u);
      write_at_finish(finishing);
      EXPECT_EQ(finishing.tier->counters().kept_writes.load(), 2u) << "blocks 0 and 1: the whole ones stay";
      EXPECT_EQ(finishing.tier->counters().writes.load(), 1u) << "block 2 is whole here too (SET)";
    } else {
      write_at_finish(finishing);
      EXPECT_EQ(finishing.tier->counters().writes.load(), 3u) << "nothing under the keys yet";
      EXPECT_LT(stored_sizes()[0], whole);
      write_running(running);
      EXPECT_EQ(running.tier->counters().writes.load(), 3u) << "whole blocks replace the partial ones";
      EXPECT_EQ(running.tier->counters().kept_writes.load(), 0u);
    }
    const std::vector<std::uint64_t> sizes = stored_sizes();
    ASSERT_EQ(sizes.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(sizes[i], whole) << "block " << i << (whole_first ? "" : ", partial first");

    Server second = make_kinds_server(redis.url(), window_geometry());
    Sequence other;
    for (std::uint32_t t = 0; t < 16; ++t) other.push(conversation.tokens[t]);
    for (std::int32_t t : sequence_of(6, 44).tokens) other.push(t);
    std::uint32_t reused = 99;
    auto b = open_ready(second, 3, other.tokens, reused);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(reused, 16u);
    const Output got = run(second, b->handle, other, reused, 22);
    second.rt->finish(b->handle);
    expect_equal(got, without_reuse(window_geometry(), other, reused, 22), "after both writers");
  }
}

// Random prompts over shared stems on four servers in turn (window-layer and hybrid geometries): every
// admission's outputs equal no reuse, byte for byte; the tier restores some, and cuts some.
TEST_F(TierKinds, RandomPromptsOverSharedStemsEqualNoReuse) {
  std::uint64_t restores = 0, ring_cuts = 0, state_cuts = 0, requests = 0, kind_restores[2] = {0, 0};
  for (const bool hybrid : {false, true}) {
    const Geometry g = hybrid ? hybrid_geometry() : window_geometry();
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      ASSERT_NE(redis.command("FLUSHALL"), "");
      std::mt19937_64 rng(seed * 31 + (hybrid ? 7 : 0));
      std::vector<Server> servers;
      for (int i = 0; i < 4; ++i) servers.push_back(make_kinds_server(redis.url(), g));
      const Sequence stem = sequence_of(48, 700 + seed);
      for (std::uint32_t r = 0; r < 12; ++r) {
        Sequence s;
        // Lengths just past a block end (a window layer's ring then still holds the block's window
        // rows when the turn finishes).
        const std::uint32_t total = kBlock * (1 + static_cast<std::uint32_t>(rng() % 6)) + static_cast<std::uint32_t>(rng() % 4) + 1;
        // Half the turns are the stem itself (they write blocks with window rows at the stem's ends).
        const std::uint32_t part = rng() % 2 == 0 ? total : static_cast<std::uint32_t>(rng() % total);
        const auto shared = std::min<std::uint32_t>(part, 48);
        for (std::uint32_t t = 0; t < shared; ++t) s.push(stem.tokens[t]);
        for (std::int32_t t : sequence_of(total - shared, seed * 100 + r).tokens) s.push(t);
        Server& sv = servers[r % 4];
        Output got;
        const std::uint32_t reused = turn(sv, r + 1, s, total, &got);
        ASSERT_LT(reused, total);
        expect_equal(got, without_reuse(g, s, reused, total),
                     fmt::format("{} seed {} request {}: shared {}, total {}, reused {}", hybrid ? "hybrid" : "window", seed,
                                 r, shared, total, reused));
        ASSERT_EQ(sv.rt->check(), nullptr);
        ++requests;
      }
      for (Server& sv : servers) {
        restores += sv.rt->counters().tier_restores;
        kind_restores[hybrid ? 1 : 0] += sv.rt->counters().tier_restores;
        ring_cuts += sv.rt->counters().tier_ring_cuts;
        state_cuts += sv.rt->counters().tier_state_cuts;
        EXPECT_EQ(sv.rt->counters().heap_allocations_in_steps, 0u);
      }
    }
  }
  std::printf("tier, window layers and hybrids, random prompts: %llu requests, %llu restored from the tier, %llu ring "
              "cuts, %llu state cuts\n",
              static_cast<unsigned long long>(requests), static_cast<unsigned long long>(restores),
              static_cast<unsigned long long>(ring_cuts), static_cast<unsigned long long>(state_cuts));
  EXPECT_GT(kind_restores[0], 5u) << "window layers";
  EXPECT_GT(kind_restores[1], 5u) << "hybrids";
}

}  // namespace
}  // namespace activekv::tier_test
