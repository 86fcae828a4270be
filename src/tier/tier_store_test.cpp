// tier_store_test.cpp — the tier against a real redis-server: reads, writes, and every failure a counted miss.
#include "tier/tier_store.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "tier/redis_fixture.hpp"
#include "tier/tier_block.hpp"
#include "tier/tier_reader.hpp"
#include "tier/write_behind.hpp"

namespace activekv::tier {
namespace {

using Clock = std::chrono::steady_clock;
using testing::RedisServer;

constexpr std::uint64_t kModel = 0x5eed;
constexpr std::uint32_t kPage = 8, kBlock = 16;

Geometry geometry() {
  Geometry g;
  g.dense_layers = 2;
  g.kv_heads = 2;
  g.head_dim = 8;
  g.dtype = DType::f16;
  return g;
}

// Rows of block b of a conversation: a pure function of (b, layer, byte), so a restore can be checked.
std::vector<std::byte> block_value(std::uint32_t b, std::uint64_t chain_hash, const Geometry& g = geometry()) {
  const std::uint64_t layer_bytes = std::uint64_t{kBlock} * g.row_bytes();
  std::vector<std::vector<std::byte>> layers(g.dense_layers, std::vector<std::byte>(layer_bytes));
  std::vector<std::span<const std::byte>> spans;
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    for (std::uint64_t i = 0; i < layer_bytes; ++i) layers[l][i] = static_cast<std::byte>((b * 29 + l * 7 + i) & 0xff);
    spans.emplace_back(layers[l]);
  }
  std::vector<std::byte> out(tier_block_bytes(g, kBlock));
  encode_tier_block(TierBlockIdentity{kModel, g, kBlock, b, chain_hash}, spans, out);
  return out;
}

std::vector<std::uint64_t> chain_of(std::uint32_t blocks, std::int32_t salt = 0) {
  std::vector<std::int32_t> tokens(std::size_t{blocks} * kBlock);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i * 13 + 5 + salt);
  std::vector<std::uint64_t> chain(blocks);
  EXPECT_EQ(tier_block_chain(tokens, kPage, kBlock, kModel, chain), blocks);
  return chain;
}

TierStoreConfig config_for(const RedisServer& server) {
  auto c = parse_tier_url(server.url(), "--kv-tier");
  EXPECT_TRUE(c.ok());
  TierStoreConfig config = c.value();
  config.connect_timeout_ms = 200;
  config.command_timeout_ms = 200;
  config.backoff_ms_min = 50;
  config.backoff_ms_max = 400;
  return config;
}

void put_blocks(TierStore& store, const std::vector<std::uint64_t>& chain, std::initializer_list<std::uint32_t> which) {
  for (std::uint32_t b : which) {
    ASSERT_TRUE(store.put(tier_block_key(kModel, geometry(), chain[b]), block_value(b, chain[b])));
  }
}

class TierStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisServer::available()) GTEST_SKIP() << "redis-server is not installed (scripts/install-deps.sh --test)";
    ASSERT_TRUE(server.start());
  }
  RedisServer server;
  TierCounters counters;
};

TEST(TierUrl, ParsesAndRefusesWithTheSettingNamed) {
  auto ok = parse_tier_url("redis://10.0.0.2:7000", "--kv-tier");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->host, "10.0.0.2");
  EXPECT_EQ(ok->port, 7000);
  auto plain = parse_tier_url("redis://cache/", "--kv-tier");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->port, 6379);
  for (const char* bad : {"", "http://x:1", "redis://", "redis://:5", "redis://h:0", "redis://h:70000", "redis://h:1x"}) {
    auto r = parse_tier_url(bad, "--kv-tier");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().setting, "--kv-tier");
  }
}

TEST_F(TierStoreTest, AChainReadsUpToItsFirstMissAndEveryAcceptedBlockIsTheWrittenRows) {
  TierStore store(config_for(server), &counters);
  const auto chain = chain_of(4);
  put_blocks(store, chain, {0, 1, 3});  // block 2 absent: block 3 is useless without it
  TierChainRead read;
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain, read);
  ASSERT_EQ(read.blocks, 2u);
  for (std::uint32_t b = 0; b < 2; ++b) {
    const auto expected = block_value(b, chain[b]);
    const auto payload = tier_chain_payload(read, b);
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), expected.begin() + kTierHeaderBytes)) << "block " << b;
  }
  EXPECT_EQ(counters.hits.load(), 2u);
  EXPECT_EQ(counters.misses.load(), 1u);
  EXPECT_EQ(counters.errors.load(), 0u);
  const std::uint64_t value_bytes = tier_block_bytes(geometry(), kBlock);
  EXPECT_EQ(counters.bytes_written.load(), 3 * value_bytes);
  EXPECT_EQ(counters.bytes_read.load(), 2 * value_bytes);
  // Another conversation shares nothing.
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain_of(4, 1), read);
  EXPECT_EQ(read.blocks, 0u);
  EXPECT_EQ(counters.misses.load(), 2u);
}

TEST_F(TierStoreTest, ACorruptedValueOrAnotherGeometryUnderTheKeyIsRefusedAndCounted) {
  TierStore store(config_for(server), &counters);
  const auto chain = chain_of(3);
  put_blocks(store, chain, {0, 1, 2});
  // Flip one payload byte of block 1 by hand (SETRANGE).
  const std::string key1 = tier_block_key(kModel, geometry(), chain[1]);
  server.command("SETRANGE " + key1 + " 100 Z");
  TierChainRead read;
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain, read);
  EXPECT_EQ(read.blocks, 1u);
  EXPECT_EQ(read.stopped_by, TierBlockCheck::bad_checksum);
  EXPECT_EQ(counters.refused.load(), 1u);
  // Block 0 replaced by a block of another geometry, planted under this reader's key.
  Geometry other = geometry();
  other.kv_heads = 1;
  ASSERT_TRUE(store.put(tier_block_key(kModel, geometry(), chain[0]), block_value(0, chain[0], other)));
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain, read);
  EXPECT_EQ(read.blocks, 0u);
  EXPECT_EQ(read.stopped_by, TierBlockCheck::wrong_geometry);
  EXPECT_EQ(counters.refused.load(), 2u);
  EXPECT_EQ(counters.misses.load(), 2u);
  EXPECT_EQ(counters.hits.load(), 1u);
}

TEST_F(TierStoreTest, FlushedIsAMiss) {
  TierStore store(config_for(server), &counters);
  const auto chain = chain_of(2);
  put_blocks(store, chain, {0, 1});
  EXPECT_EQ(server.command("FLUSHALL"), "OK");
  TierChainRead read;
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain, read);
  EXPECT_EQ(read.blocks, 0u);
  EXPECT_EQ(counters.misses.load(), 1u);
  EXPECT_EQ(counters.errors.load(), 0u);
}

TEST_F(TierStoreTest, KilledIsAMissWithBackOffAndARestartReconnects) {
  TierStoreConfig config = config_for(server);
  TierStore store(config, &counters);
  const auto chain = chain_of(2);
  put_blocks(store, chain, {0, 1});
  server.stop();
  TierChainRead read;
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain, read);
  EXPECT_EQ(read.blocks, 0u);
  EXPECT_EQ(counters.errors.load(), 1u);
  EXPECT_FALSE(store.connected());
  // Within the back-off: a miss at once, no new attempt, no new error.
  const auto t0 = Clock::now();
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain, read);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(20));
  EXPECT_EQ(counters.errors.load(), 1u);
  EXPECT_EQ(counters.misses.load(), 2u);
  EXPECT_FALSE(store.put("k", std::vector<std::byte>(4)));
  // Restarted on the same port (empty: no persistence): after the back-off it reconnects.
  ASSERT_TRUE(server.start(config.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(config.backoff_ms_max + 50));
  put_blocks(store, chain, {0, 1});
  EXPECT_TRUE(store.connected());
  EXPECT_GE(counters.reconnects.load(), 1u);
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain, read);
  EXPECT_EQ(read.blocks, 2u);
}

TEST_F(TierStoreTest, AStalledStoreIsAMissWithinTheTimeout) {
  TierStoreConfig config = config_for(server);
  TierStore store(config, &counters);
  const auto chain = chain_of(2);
  put_blocks(store, chain, {0, 1});
  server.pause();
  TierChainRead read;
  const auto t0 = Clock::now();
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain, read);
  const auto waited = Clock::now() - t0;
  server.resume();
  EXPECT_EQ(read.blocks, 0u);
  EXPECT_EQ(counters.errors.load(), 1u);
  EXPECT_GE(waited, std::chrono::milliseconds(config.command_timeout_ms - 20));
  EXPECT_LT(waited, std::chrono::milliseconds(config.command_timeout_ms * 3));
  // Once it answers again, a read after the back-off is whole (the stalled connection was dropped).
  std::this_thread::sleep_for(std::chrono::milliseconds(config.backoff_ms_min * 2 + 20));
  read_tier_chain(store, counters, kModel, geometry(), kBlock, chain, read);
  EXPECT_EQ(read.blocks, 2u);
}

// Host rows of block b (a pure function of b, layer and byte, as block_value encodes them).
struct BlockRows {
  std::vector<std::vector<std::byte>> layers;
  std::vector<std::span<const std::byte>> spans;
};
BlockRows rows_of_block(std::uint32_t b, const Geometry& g = geometry()) {
  const std::uint64_t layer_bytes = std::uint64_t{kBlock} * g.row_bytes();
  BlockRows r;
  r.layers.assign(g.dense_layers, std::vector<std::byte>(layer_bytes));
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    for (std::uint64_t i = 0; i < layer_bytes; ++i) r.layers[l][i] = static_cast<std::byte>((b * 29 + l * 7 + i) & 0xff);
    r.spans.emplace_back(r.layers[l]);
  }
  return r;
}

TEST_F(TierStoreTest, WriteBehindStoresBlocksAndDropsWhenTheStoreIsSlow) {
  const std::uint64_t value_bytes = tier_block_bytes(geometry(), kBlock);
  auto created = WriteBehind::create(config_for(server), &counters, 2, value_bytes, geometry().dense_layers);
  ASSERT_TRUE(created.ok());
  WriteBehind& writer = *created.value();
  const auto chain = chain_of(6);
  std::vector<BlockRows> rows;
  for (std::uint32_t b = 0; b < 6; ++b) rows.push_back(rows_of_block(b));
  auto submit = [&](std::uint32_t b) {
    return writer.submit(tier_block_key(kModel, geometry(), chain[b]), TierBlockIdentity{kModel, geometry(), kBlock, b, chain[b]},
                         rows[b].spans, /*lease=*/b);
  };
  for (std::uint32_t b = 0; b < 2; ++b) EXPECT_TRUE(submit(b));
  writer.drain();
  EXPECT_EQ(counters.writes.load(), 2u);
  EXPECT_EQ(counters.bytes_written.load(), 2 * value_bytes);
  TierStore reader(config_for(server), &counters);
  TierChainRead read;
  read_tier_chain(reader, counters, kModel, geometry(), kBlock, std::span(chain).first(2), read);
  EXPECT_EQ(read.blocks, 2u);
  // The worker encoded the value from the caller's rows: byte-equal to encoding them here.
  EXPECT_TRUE(std::equal(read.values[1].begin(), read.values[1].end(),
                         reinterpret_cast<const char*>(block_value(1, chain[1]).data())));

  // The store stalls: the worker holds one slot in a SET that times out; the queue
  // fills, and every further submit returns at once, dropped and counted.
  server.pause();
  std::uint32_t accepted = 0, dropped = 0;
  auto worst = Clock::duration::zero();
  for (std::uint32_t round = 0; round < 20; ++round) {
    const auto t0 = Clock::now();
    (submit(2 + round % 4) ? accepted : dropped) += 1;
    worst = std::max(worst, Clock::now() - t0);
  }
  server.resume();
  writer.drain();
  EXPECT_LE(accepted, 3u);  // two slots, plus one freed if a SET timed out meanwhile
  EXPECT_GE(dropped, 17u);
  EXPECT_LT(worst, std::chrono::milliseconds(50));  // never waited on the network
  EXPECT_EQ(counters.writes.load() + counters.dropped_writes.load(), 2u + 20u);
}

TEST_F(TierStoreTest, WriteBehindReadsTheCallersRowsUnderALeaseHeldUntilTheWriteEnds) {
  const std::uint64_t value_bytes = tier_block_bytes(geometry(), kBlock);
  auto created = WriteBehind::create(config_for(server), &counters, 4, value_bytes, geometry().dense_layers);
  ASSERT_TRUE(created.ok());
  WriteBehind& writer = *created.value();
  const auto chain = chain_of(2);
  BlockRows rows = rows_of_block(0);
  writer.pause(true);
  ASSERT_TRUE(writer.submit(tier_block_key(kModel, geometry(), chain[0]), TierBlockIdentity{kModel, geometry(), kBlock, 0, chain[0]},
                            rows.spans, /*lease=*/7));
  // Nothing was copied: the queued job points at the caller's own rows, and lease 7 is held.
  EXPECT_EQ(writer.queued_rows(0, 1).data(), rows.layers[1].data());
  EXPECT_TRUE(writer.lease_held(7));
  EXPECT_FALSE(writer.lease_held(8));
  // What the worker writes is what the rows hold when it reads them (here: changed before it ran),
  // which is why the runtime keeps a leased history off its free list.
  rows.layers[0][0] = std::byte{0x5a};
  writer.pause(false);
  writer.drain();
  EXPECT_FALSE(writer.lease_held(7));
  TierStore reader(config_for(server), &counters);
  TierChainRead read;
  read_tier_chain(reader, counters, kModel, geometry(), kBlock, std::span(chain).first(1), read);
  ASSERT_EQ(read.blocks, 1u);
  EXPECT_EQ(static_cast<unsigned char>(tier_chain_payload(read, 0)[0]), 0x5au);
}

}  // namespace
}  // namespace activekv::tier
