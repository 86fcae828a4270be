// tier_block_test.cpp — the tier's block format: round trip, and every kind of wrong value refused.
#include "tier/tier_block.hpp"

#include <gtest/gtest.h>

#include <array>

#include <vector>

#include "testing/alloc_counter.hpp"

namespace activekv::tier {
namespace {

Geometry small_geometry() {
  Geometry g;
  g.dense_layers = 3;
  g.kv_heads = 2;
  g.head_dim = 4;
  g.dtype = DType::f16;
  return g;  // row_bytes = 2 × 2 × 4 × 2 = 32
}

struct Block {
  TierBlockIdentity id;
  std::vector<std::vector<std::byte>> layers;
  std::vector<std::byte> value;
};

Block make_block(std::uint32_t tokens = 16, std::uint64_t seed = 7) {
  Block b;
  b.id = TierBlockIdentity{0xabcdef, small_geometry(), tokens, 2, 0x1234567890ull};
  const std::uint64_t layer_bytes = std::uint64_t{tokens} * b.id.geometry.row_bytes();
  std::vector<std::span<const std::byte>> spans;
  b.layers.resize(b.id.geometry.dense_layers);
  for (std::uint32_t l = 0; l < b.id.geometry.dense_layers; ++l) {
    b.layers[l].resize(layer_bytes);
    for (std::uint64_t i = 0; i < layer_bytes; ++i) b.layers[l][i] = static_cast<std::byte>((seed * 131 + l * 17 + i * 7) & 0xff);
  }
  for (auto& l : b.layers) spans.emplace_back(l);
  b.value.resize(tier_block_bytes(b.id.geometry, tokens));
  encode_tier_block(b.id, spans, b.value);
  return b;
}

TEST(TierBlock, RoundTripGivesEveryLayersRows) {
  Block b = make_block();
  EXPECT_EQ(b.value.size(), kTierHeaderBytes + 3u * 16 * 32);
  std::span<const std::byte> payload;
  ASSERT_EQ(decode_tier_block(b.value, b.id, &payload), TierBlockCheck::ok);
  for (std::uint32_t l = 0; l < 3; ++l) {
    const auto rows = tier_block_layer(payload, b.id.geometry, 16, l);
    ASSERT_EQ(rows.size(), b.layers[l].size());
    EXPECT_TRUE(std::equal(rows.begin(), rows.end(), b.layers[l].begin())) << "layer " << l;
  }
}

TEST(TierBlock, EncodeDoesNotAllocate) {
  Block b = make_block();
  std::vector<std::span<const std::byte>> spans(b.layers.begin(), b.layers.end());
  std::vector<std::byte> out(b.value.size());
  const auto before = activekv::testing::heap_allocations();
  encode_tier_block(b.id, spans, out);
  std::span<const std::byte> payload;
  EXPECT_EQ(decode_tier_block(out, b.id, &payload), TierBlockCheck::ok);
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
  EXPECT_EQ(out, b.value);
}

TEST(TierBlock, AFlippedPayloadBitIsABadChecksum) {
  Block b = make_block();
  for (std::size_t at : {kTierHeaderBytes, b.value.size() / 2, b.value.size() - 1}) {
    std::vector<std::byte> v = b.value;
    v[at] ^= std::byte{0x10};
    EXPECT_EQ(decode_tier_block(v, b.id, nullptr), TierBlockCheck::bad_checksum) << "byte " << at;
  }
}

TEST(TierBlock, EveryHeaderMismatchIsRefusedAndNamed) {
  Block b = make_block();
  auto with = [&](std::size_t at, std::byte x) { std::vector<std::byte> v = b.value; v[at] ^= x; return v; };
  EXPECT_EQ(decode_tier_block(with(0, std::byte{1}), b.id, nullptr), TierBlockCheck::bad_magic);
  EXPECT_EQ(decode_tier_block(with(4, std::byte{1}), b.id, nullptr), TierBlockCheck::wrong_version);
  EXPECT_EQ(decode_tier_block(with(8, std::byte{1}), b.id, nullptr), TierBlockCheck::wrong_model);
  EXPECT_EQ(decode_tier_block(with(16, std::byte{1}), b.id, nullptr), TierBlockCheck::wrong_geometry);
  EXPECT_EQ(decode_tier_block(with(28, std::byte{1}), b.id, nullptr), TierBlockCheck::wrong_geometry);
  EXPECT_EQ(decode_tier_block(with(36, std::byte{1}), b.id, nullptr), TierBlockCheck::wrong_key);
  EXPECT_EQ(decode_tier_block(with(40, std::byte{1}), b.id, nullptr), TierBlockCheck::wrong_key);
  EXPECT_EQ(decode_tier_block(with(48, std::byte{1}), b.id, nullptr), TierBlockCheck::wrong_size);
  EXPECT_EQ(decode_tier_block(with(56, std::byte{1}), b.id, nullptr), TierBlockCheck::bad_checksum);
  std::vector<std::byte> shorter(b.value.begin(), b.value.end() - 1);
  EXPECT_EQ(decode_tier_block(shorter, b.id, nullptr), TierBlockCheck::wrong_size);
  std::vector<std::byte> tiny(b.value.begin(), b.value.begin() + 10);
  EXPECT_EQ(decode_tier_block(tiny, b.id, nullptr), TierBlockCheck::too_short);
  EXPECT_STREQ(tier_block_check_name(TierBlockCheck::wrong_geometry), "another geometry");
}

TEST(TierBlock, AValueOfAnotherGeometryIsRefusedEvenUnderItsKey) {
  // A block written by a model with another head count, planted where this reader looks.
  Block b = make_block();
  TierBlockIdentity reader = b.id;
  reader.geometry.kv_heads = 1;
  EXPECT_EQ(decode_tier_block(b.value, reader, nullptr), TierBlockCheck::wrong_geometry);
  reader = b.id;
  reader.geometry.dtype = DType::bf16;
  EXPECT_EQ(decode_tier_block(b.value, reader, nullptr), TierBlockCheck::wrong_geometry);
  // And the keys differ, so a reader of another geometry never even asks for it.
  EXPECT_NE(tier_block_key(1, b.id.geometry, 5), tier_block_key(1, reader.geometry, 5));
  EXPECT_NE(tier_block_key(1, b.id.geometry, 5), tier_block_key(2, b.id.geometry, 5));
  // The write-behind path's allocation-free form writes the same key.
  std::array<char, kTierKeyBytes> key{};
  const auto before = activekv::testing::heap_allocations();
  const std::size_t n = tier_block_key_to(key, 1, b.id.geometry, 5);
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
  EXPECT_EQ(std::string(key.data(), n), tier_block_key(1, b.id.geometry, 5));
  EXPECT_EQ(tier_block_key(1, b.id.geometry, 5), tier_block_key(1, b.id.geometry, 5));
}

TEST(TierBlock, ChainNamesTheBlockAndEverythingBeforeIt) {
  std::vector<std::int32_t> a(64), c(64);
  for (int i = 0; i < 64; ++i) a[i] = c[i] = i * 3 + 1;
  c[40] = 999;  // differs in block 2 (block_tokens 16)
  std::uint64_t ha[4], hc[4];
  ASSERT_EQ(tier_block_chain(a, 8, 16, 42, ha), 4u);
  ASSERT_EQ(tier_block_chain(c, 8, 16, 42, hc), 4u);
  EXPECT_EQ(ha[0], hc[0]);
  EXPECT_EQ(ha[1], hc[1]);
  EXPECT_NE(ha[2], hc[2]);
  EXPECT_NE(ha[3], hc[3]);  // a later block differs because an earlier one did
  std::uint64_t other[4];
  ASSERT_EQ(tier_block_chain(a, 8, 16, 43, other), 4u);
  EXPECT_NE(other[0], ha[0]);  // another model never shares a key
  // A partial last block is not a block.
  std::uint64_t part[4];
  EXPECT_EQ(tier_block_chain(std::span<const std::int32_t>(a).first(47), 8, 16, 42, part), 2u);
  EXPECT_EQ(part[1], ha[1]);
}

}  // namespace
}  // namespace activekv::tier
