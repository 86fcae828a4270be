// tier_block.cpp — see tier_block.hpp.
#include "tier/tier_block.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "activekv/assert.hpp"
#include "runtime/prefix_index.hpp"

namespace activekv::tier {
namespace {

constexpr std::uint32_t kMagic = 0x54564b41u;  // "AKVT" read little-endian

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
void put(std::byte* at, T value) noexcept {
  for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<std::byte>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xff);
}

template <typename T>
T get(const std::byte* at) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<std::uint64_t>(at[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

std::uint64_t tier_block_bytes(const Geometry& geometry, std::uint32_t token_count) noexcept {
  return kTierHeaderBytes + std::uint64_t{geometry.dense_layers} * token_count * geometry.row_bytes();
}

std::uint64_t tier_checksum(std::span<const std::byte> bytes) noexcept {
  // Four independent lanes of (h ^ word) × odd constant, folded with mix: ~GB/s, and
  // every bit of every word reaches the result.
  std::uint64_t lane[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};
  const std::size_t words = bytes.size() / 8;
  const std::byte* p = bytes.data();
  for (std::size_t w = 0; w < words; ++w) {
    std::uint64_t v;
    std::memcpy(&v, p + w * 8, 8);
    std::uint64_t& h = lane[w & 3];
    h = (h ^ v) * 0x9fb21c651e98df25ull;
    h ^= h >> 29;
  }
  std::uint64_t tail = 0;
  for (std::size_t i = words * 8; i < bytes.size(); ++i) tail = (tail << 8) | static_cast<std::uint64_t>(p[i]);
  return mix(mix(lane[0] ^ mix(lane[1])) ^ mix(lane[2] ^ mix(lane[3])) ^ mix(tail ^ bytes.size()));
}

std::uint64_t tier_geometry_hash(const Geometry& geometry) noexcept {
  std::uint64_t h = mix(0x67656f6dull);
  h = mix(h ^ geometry.dense_layers);
  h = mix(h ^ geometry.kv_heads);
  h = mix(h ^ geometry.head_dim);
  return mix(h ^ static_cast<std::uint64_t>(geometry.dtype));
}

std::string tier_block_key(std::uint64_t model_identity, const Geometry& geometry, std::uint64_t chain_hash) {
  return fmt::format("akv:{:016x}:{:016x}:{:016x}", model_identity, tier_geometry_hash(geometry), chain_hash);
}

std::size_t tier_block_key_to(std::span<char, kTierKeyBytes> out, std::uint64_t model_identity, const Geometry& geometry,
                              std::uint64_t chain_hash) noexcept {
  const auto r = fmt::format_to_n(out.data(), out.size(), "akv:{:016x}:{:016x}:{:016x}", model_identity,
                                  tier_geometry_hash(geometry), chain_hash);
  AK_ASSERT(r.size == kTierKeyBytes, "tier block: a key is 54 characters");
  return r.size;
}

void encode_tier_block(const TierBlockIdentity& id, std::span<const std::span<const std::byte>> layer_rows,
                       std::span<std::byte> out) noexcept {
  const Geometry& g = id.geometry;
  const std::uint64_t layer_bytes = std::uint64_t{id.token_count} * g.row_bytes();
  AK_ASSERT(layer_rows.size() == g.dense_layers, "tier block: one row span per dense layer");
  AK_ASSERT(out.size() == tier_block_bytes(g, id.token_count), "tier block: the output is exactly one block");
  std::byte* payload = out.data() + kTierHeaderBytes;
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    AK_ASSERT(layer_rows[l].size() == layer_bytes, "tier block: a layer's rows are token_count × row_bytes");
    std::memcpy(payload + l * layer_bytes, layer_rows[l].data(), layer_bytes);
  }
  const std::uint64_t payload_bytes = layer_bytes * g.dense_layers;
  std::byte* h = out.data();
  std::memset(h, 0, kTierHeaderBytes);
  put<std::uint32_t>(h + 0, kMagic);
  put<std::uint16_t>(h + 4, kTierFormatVersion);
  put<std::uint16_t>(h + 6, static_cast<std::uint16_t>(kTierHeaderBytes));
  put<std::uint64_t>(h + 8, id.model_identity);
  put<std::uint32_t>(h + 16, g.dense_layers);
  put<std::uint32_t>(h + 20, g.kv_heads);
  put<std::uint32_t>(h + 24, g.head_dim);
  put<std::uint8_t>(h + 28, static_cast<std::uint8_t>(g.dtype));
  put<std::uint32_t>(h + 32, id.token_count);
  put<std::uint32_t>(h + 36, id.block_index);
  put<std::uint64_t>(h + 40, id.chain_hash);
  put<std::uint64_t>(h + 48, payload_bytes);
  put<std::uint64_t>(h + 56, tier_checksum({payload, payload_bytes}));
}

const char* tier_block_check_name(TierBlockCheck check) noexcept {
  switch (check) {
    case TierBlockCheck::ok: return "ok";
    case TierBlockCheck::too_short: return "too short";
    case TierBlockCheck::bad_magic: return "bad magic";
    case TierBlockCheck::wrong_version: return "wrong format version";
    case TierBlockCheck::wrong_model: return "another model";
    case TierBlockCheck::wrong_geometry: return "another geometry";
    case TierBlockCheck::wrong_key: return "another block";
    case TierBlockCheck::wrong_size: return "wrong size";
    case TierBlockCheck::bad_checksum: return "bad checksum";
  }
  return "unknown";
}

TierBlockCheck decode_tier_block(std::span<const std::byte> value, const TierBlockIdentity& expected,
                                 std::span<const std::byte>* payload) noexcept {
  if (value.size() < kTierHeaderBytes) return TierBlockCheck::too_short;
  const std::byte* h = value.data();
  if (get<std::uint32_t>(h + 0) != kMagic) return TierBlockCheck::bad_magic;
  if (get<std::uint16_t>(h + 4) != kTierFormatVersion) return TierBlockCheck::wrong_version;
  if (get<std::uint16_t>(h + 6) != kTierHeaderBytes) return TierBlockCheck::wrong_version;
  if (get<std::uint64_t>(h + 8) != expected.model_identity) return TierBlockCheck::wrong_model;
  const Geometry& g = expected.geometry;
  if (get<std::uint32_t>(h + 16) != g.dense_layers || get<std::uint32_t>(h + 20) != g.kv_heads ||
      get<std::uint32_t>(h + 24) != g.head_dim || get<std::uint8_t>(h + 28) != static_cast<std::uint8_t>(g.dtype)) {
    return TierBlockCheck::wrong_geometry;
  }
  if (get<std::uint32_t>(h + 32) != expected.token_count || get<std::uint32_t>(h + 36) != expected.block_index ||
      get<std::uint64_t>(h + 40) != expected.chain_hash) {
    return TierBlockCheck::wrong_key;
  }
  const std::uint64_t payload_bytes = get<std::uint64_t>(h + 48);
  const std::uint64_t want = std::uint64_t{g.dense_layers} * expected.token_count * g.row_bytes();
  if (payload_bytes != want || value.size() != kTierHeaderBytes + want) return TierBlockCheck::wrong_size;
  const std::span<const std::byte> rows = value.subspan(kTierHeaderBytes);
  if (get<std::uint64_t>(h + 56) != tier_checksum(rows)) return TierBlockCheck::bad_checksum;
  if (payload != nullptr) *payload = rows;
  return TierBlockCheck::ok;
}

std::span<const std::byte> tier_block_layer(std::span<const std::byte> payload, const Geometry& geometry,
                                            std::uint32_t token_count, std::uint32_t layer) noexcept {
  const std::uint64_t layer_bytes = std::uint64_t{token_count} * geometry.row_bytes();
  AK_ASSERT(layer < geometry.dense_layers, "tier block: layer outside the geometry");
  AK_ASSERT(payload.size() == layer_bytes * geometry.dense_layers, "tier block: a decoded payload");
  return payload.subspan(layer * layer_bytes, layer_bytes);
}

std::uint32_t tier_block_chain(std::span<const std::int32_t> tokens, std::uint32_t page_tokens,
                               std::uint32_t block_tokens, std::uint64_t model_identity,
                               std::span<std::uint64_t> out) noexcept {
  AK_ASSERT(page_tokens > 0 && block_tokens % page_tokens == 0, "tier block: a block is a whole number of pages");
  const std::size_t blocks = std::min<std::size_t>(tokens.size() / block_tokens, out.size());
  std::uint64_t parent = runtime::prefix_chain_root(model_identity);
  std::size_t page = 0;
  for (std::size_t b = 0; b < blocks; ++b) {
    for (std::uint32_t p = 0; p < block_tokens / page_tokens; ++p, ++page) {
      parent = runtime::prefix_chain_page(parent, tokens.data() + page * page_tokens, page_tokens);
    }
    out[b] = parent;
  }
  return static_cast<std::uint32_t>(blocks);
}

}  // namespace activekv::tier
