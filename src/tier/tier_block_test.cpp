// tier_block_test.cpp — the tier's block format: round trip, and every kind of wrong value refused.
#include "tier/tier_block.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

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
  TierBlockView view;
  ASSERT_EQ(decode_tier_block(b.value, b.id, &view), TierBlockCheck::ok);
  EXPECT_EQ(view.window_from, 0u);
  EXPECT_TRUE(view.state.empty());
  for (std::uint32_t l = 0; l < 3; ++l) {
    const auto rows = tier_block_layer(view, b.id.geometry, 16, l);
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
  TierBlockView view;
  EXPECT_EQ(decode_tier_block(out, b.id, &view), TierBlockCheck::ok);
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
  // The header's own checksum catches a damaged size, payload checksum or window_from.
  EXPECT_EQ(decode_tier_block(with(48, std::byte{1}), b.id, nullptr), TierBlockCheck::bad_header);
  EXPECT_EQ(decode_tier_block(with(56, std::byte{1}), b.id, nullptr), TierBlockCheck::bad_header);
  EXPECT_EQ(decode_tier_block(with(88, std::byte{1}), b.id, nullptr), TierBlockCheck::bad_header);
  EXPECT_EQ(decode_tier_block(with(29, std::byte{1}), b.id, nullptr), TierBlockCheck::bad_header);
  EXPECT_EQ(decode_tier_block(with(64, std::byte{1}), b.id, nullptr), TierBlockCheck::wrong_geometry);
  EXPECT_EQ(decode_tier_block(with(80, std::byte{1}), b.id, nullptr), TierBlockCheck::wrong_geometry);
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

// ---- format 2: window layers' rows and a hybrid's state --------------------------------------

// Layers 0 and 2 are window layers (W 8), layer 1 a full one; the history's window layers are rings
// of 12 rows, its full layer a segment. Row bytes: token t, layer l → a byte pattern of (t, l).
struct History {
  Geometry g;
  std::uint32_t ring = 12;
  std::vector<std::vector<std::byte>> layers;
  std::vector<std::byte> state;
  std::vector<TierRowSource> sources;
};

std::byte pattern(std::uint32_t t, std::uint32_t l, std::uint64_t i) { return static_cast<std::byte>((t * 31 + l * 7 + i) & 0xff); }

History window_history(std::uint32_t length, std::uint64_t state_bytes = 0) {
  History h;
  h.g = small_geometry();
  h.g.kinds.window_tokens = 8;
  h.g.kinds.set_window(0);
  h.g.kinds.set_window(2);
  h.g.recurrent_state_bytes = state_bytes;
  h.g.recurrent_layers = state_bytes != 0 ? 1 : 0;
  const std::uint64_t row = h.g.row_bytes();
  h.layers.resize(3);
  for (std::uint32_t l = 0; l < 3; ++l) {
    const bool ring = h.g.kinds.is_window(l);
    h.layers[l].assign((ring ? h.ring : 64) * row, std::byte{0});
    for (std::uint32_t t = 0; t < length; ++t) {  // written in order: a ring keeps the last 12
      const std::uint64_t slot = ring ? t % h.ring : t;
      for (std::uint64_t i = 0; i < row; ++i) h.layers[l][slot * row + i] = pattern(t, l, i);
    }
    h.sources.push_back(TierRowSource{h.layers[l].data(), ring ? h.ring : 0, 0});
  }
  h.state.resize(state_bytes);
  for (std::uint64_t i = 0; i < state_bytes; ++i) h.state[i] = static_cast<std::byte>(i * 13 + 5);
  return h;
}

TEST(TierBlockV2, AWindowBlockCarriesOnlyTheRowsTheRingHeldAndRoundTrips) {
  // A 20-token history: its rings hold tokens 8..19, so block 1 (tokens 8..15) carries every window row,
  // and a block of tokens 4..11 would carry 8..11 only (window_from 4).
  const History h = window_history(20);
  const TierBlockIdentity id{9, h.g, 8, 1, 0x77};
  const TierBlockContent content{2, false};  // from token 10: rows 10..15 of the window layers
  std::vector<std::byte> out(tier_block_bytes_max(h.g, 8));
  const auto before = activekv::testing::heap_allocations();
  const std::size_t n = encode_tier_block(id, h.sources, content, nullptr, out);
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
  EXPECT_EQ(n, tier_block_bytes(h.g, 8, content));
  EXPECT_EQ(n, kTierHeaderBytes + (8u + 2 * 6) * h.g.row_bytes());
  out.resize(n);
  TierBlockView view;
  ASSERT_EQ(decode_tier_block(out, id, &view), TierBlockCheck::ok);
  EXPECT_EQ(view.window_from, 2u);
  const std::uint64_t row = h.g.row_bytes();
  for (std::uint32_t l = 0; l < 3; ++l) {
    const auto rows = tier_block_layer(view, h.g, 8, l);
    const std::uint32_t first = l == 1 ? 8 : 10;
    ASSERT_EQ(rows.size(), (16 - first) * row) << "layer " << l;
    for (std::uint32_t t = first; t < 16; ++t) {
      for (std::uint64_t i = 0; i < row; ++i) ASSERT_EQ(rows[(t - first) * row + i], pattern(t, l, i)) << "layer " << l << " token " << t;
    }
  }
  // Ring slots wrap inside the block (tokens 8..15 sit in slots 8..11, 0..3): read in token order above.
  std::vector<std::byte> shorter(out.begin(), out.end() - 1);
  EXPECT_EQ(decode_tier_block(shorter, id, nullptr), TierBlockCheck::wrong_size);
  // Another window layout, or no window layers: another geometry (and another key).
  TierBlockIdentity other = id;
  other.geometry.kinds = LayerKinds{};
  other.geometry.kinds.window_tokens = 8;
  other.geometry.kinds.set_window(0);
  other.geometry.kinds.set_window(1);
  EXPECT_EQ(decode_tier_block(out, other, nullptr), TierBlockCheck::wrong_geometry);
  EXPECT_NE(tier_block_key(9, h.g, 5), tier_block_key(9, other.geometry, 5));
  other.geometry.kinds = LayerKinds{};
  EXPECT_EQ(decode_tier_block(out, other, nullptr), TierBlockCheck::wrong_geometry);
}

TEST(TierBlockV2, AHybridBlockCarriesItsStateAndRefusesAFlagWithoutOne) {
  const History h = window_history(16, /*state_bytes=*/40);
  const TierBlockIdentity id{9, h.g, 8, 1, 0x78};
  std::vector<std::byte> out(tier_block_bytes_max(h.g, 8));
  const std::size_t n = encode_tier_block(id, h.sources, TierBlockContent{0, true}, h.state.data(), out);
  EXPECT_EQ(n, out.size()) << "every row and the state: the largest value";
  TierBlockView view;
  ASSERT_EQ(decode_tier_block(out, id, &view), TierBlockCheck::ok);
  ASSERT_EQ(view.state.size(), 40u);
  EXPECT_TRUE(std::equal(view.state.begin(), view.state.end(), h.state.begin()));
  // The same block without its state is a valid value too (a restore cannot end on it).
  std::vector<std::byte> bare(tier_block_bytes_max(h.g, 8));
  bare.resize(encode_tier_block(id, h.sources, TierBlockContent{0, false}, nullptr, bare));
  ASSERT_EQ(decode_tier_block(bare, id, &view), TierBlockCheck::ok);
  EXPECT_TRUE(view.state.empty());
  // A reader whose model has no recurrent state (or another state size) refuses it by geometry.
  TierBlockIdentity dense = id;
  dense.geometry.recurrent_state_bytes = 0;
  dense.geometry.recurrent_layers = 0;
  EXPECT_EQ(decode_tier_block(out, dense, nullptr), TierBlockCheck::wrong_geometry);
  // Truncating the state is a wrong size, flipping a state byte a bad checksum.
  std::vector<std::byte> cut(out.begin(), out.end() - 8);
  EXPECT_EQ(decode_tier_block(cut, id, nullptr), TierBlockCheck::wrong_size);
  std::vector<std::byte> flipped = out;
  flipped.back() ^= std::byte{4};
  EXPECT_EQ(decode_tier_block(flipped, id, nullptr), TierBlockCheck::bad_checksum);
}

TEST(TierBlockV2, AFormatOneValueIsRefusedAsAnotherVersion) {
  // Format 1: the 64-byte header, version 1, every row, no window or state fields.
  Block b = make_block();
  std::vector<std::byte> v1(64 + 3u * 16 * 32, std::byte{0});
  std::memcpy(v1.data(), b.value.data(), 4);  // the magic
  v1[4] = std::byte{1};
  v1[6] = std::byte{64};
  std::memcpy(v1.data() + 8, b.value.data() + 8, 56);  // identity, geometry, key, sizes as format 1 had them
  EXPECT_EQ(decode_tier_block(v1, b.id, nullptr), TierBlockCheck::wrong_version);
  EXPECT_STREQ(tier_block_check_name(TierBlockCheck::bad_header), "damaged header");
}

}  // namespace
}  // namespace activekv::tier
