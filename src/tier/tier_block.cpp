// tier_block.cpp — see tier_block.hpp.
#include "tier/tier_block.hpp"

#include <algorithm>
#include <array>
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

// Which dense layers are window layers (the mask words), 0 when none is.
std::uint64_t kinds_hash(const Geometry& g) noexcept {
  if (g.window_layers() == 0) return 0;
  std::uint64_t h = mix(0x6b696e64ull);
  for (const std::uint64_t word : g.kinds.window_mask) h = mix(h ^ word);
  return h;
}

std::uint32_t layer_first(const Geometry& g, std::uint32_t layer, std::uint32_t window_from) noexcept {
  return g.kinds.is_window(layer) ? window_from : 0;
}

}  // namespace

std::uint64_t tier_block_bytes(const Geometry& geometry, std::uint32_t token_count, TierBlockContent content) noexcept {
  const std::uint64_t row = geometry.row_bytes();
  const std::uint32_t window_rows = token_count - std::min(content.window_from, token_count);
  return kTierHeaderBytes + std::uint64_t{geometry.full_layers()} * token_count * row +
         std::uint64_t{geometry.window_layers()} * window_rows * row + (content.state ? geometry.recurrent_state_bytes : 0);
}

std::uint64_t tier_block_bytes_max(const Geometry& geometry, std::uint32_t token_count) noexcept {
  return tier_block_bytes(geometry, token_count, TierBlockContent{0, geometry.recurrent_state_bytes != 0});
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
  h = mix(h ^ static_cast<std::uint64_t>(geometry.dtype));
  // Format 2: the layer kinds and the recurrent state are part of what a block's bytes mean.
  h = mix(h ^ kTierFormatVersion);
  h = mix(h ^ geometry.kinds.window_tokens);
  h = mix(h ^ kinds_hash(geometry));
  return mix(h ^ geometry.recurrent_state_bytes);
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

std::size_t encode_tier_block(const TierBlockIdentity& id, std::span<const TierRowSource> layers,
                              TierBlockContent content, const std::byte* state, std::span<std::byte> out) noexcept {
  const Geometry& g = id.geometry;
  const std::uint64_t row = g.row_bytes();
  const std::uint32_t B = id.token_count;
  content.window_from = std::min(content.window_from, B);
  const std::uint64_t bytes = tier_block_bytes(g, B, content);
  AK_ASSERT(layers.size() == g.dense_layers, "tier block: one row source per dense layer");
  AK_ASSERT(out.size() >= bytes, "tier block: the output holds the block");
  AK_ASSERT(!content.state || (state != nullptr && g.recurrent_state_bytes != 0), "tier block: a state flag with a state");
  const std::uint64_t first_token = std::uint64_t{id.block_index} * B;
  std::byte* at = out.data() + kTierHeaderBytes;
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    const TierRowSource& src = layers[l];
    // Rows in slot order, one run per stretch that does not wrap around a ring.
    for (std::uint64_t t = first_token + layer_first(g, l, content.window_from); t < first_token + B;) {
      const std::uint64_t slot = src.ring_tokens != 0 ? t % src.ring_tokens : t - src.first_token;
      const std::uint64_t run = std::min(first_token + B - t, src.ring_tokens != 0 ? src.ring_tokens - slot : first_token + B - t);
      std::memcpy(at, src.base + slot * row, run * row);
      at += run * row;
      t += run;
    }
  }
  if (content.state) {
    std::memcpy(at, state, g.recurrent_state_bytes);
    at += g.recurrent_state_bytes;
  }
  std::byte* payload = out.data() + kTierHeaderBytes;
  const std::uint64_t payload_bytes = static_cast<std::uint64_t>(at - payload);
  AK_ASSERT(payload_bytes + kTierHeaderBytes == bytes, "tier block: the payload is what tier_block_bytes counts");
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
  put<std::uint8_t>(h + 29, content.state ? kTierFlagState : 0);
  put<std::uint32_t>(h + 32, B);
  put<std::uint32_t>(h + 36, id.block_index);
  put<std::uint64_t>(h + 40, id.chain_hash);
  put<std::uint64_t>(h + 48, payload_bytes);
  put<std::uint64_t>(h + 56, tier_checksum({payload, payload_bytes}));
  put<std::uint32_t>(h + 64, g.kinds.window_tokens);
  put<std::uint32_t>(h + 68, g.window_layers());
  put<std::uint64_t>(h + 72, kinds_hash(g));
  put<std::uint64_t>(h + 80, g.recurrent_state_bytes);
  put<std::uint32_t>(h + 88, content.window_from);
  put<std::uint32_t>(h + 92, static_cast<std::uint32_t>(tier_checksum({h, 92})));
  return bytes;
}

void encode_tier_block(const TierBlockIdentity& id, std::span<const std::span<const std::byte>> layer_rows,
                       std::span<std::byte> out) noexcept {
  const Geometry& g = id.geometry;
  AK_ASSERT(layer_rows.size() == g.dense_layers && g.dense_layers <= LayerKinds::layers_max,
            "tier block: one row span per dense layer");
  AK_ASSERT(out.size() == tier_block_bytes(g, id.token_count), "tier block: the output is exactly one block");
  std::array<TierRowSource, LayerKinds::layers_max> sources{};
  const std::uint32_t first = id.block_index * id.token_count;
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    AK_ASSERT(layer_rows[l].size() == std::uint64_t{id.token_count} * g.row_bytes(),
              "tier block: a layer's rows are token_count × row_bytes");
    sources[l] = TierRowSource{layer_rows[l].data(), 0, first};
  }
  encode_tier_block(id, std::span<const TierRowSource>(sources.data(), g.dense_layers), TierBlockContent{}, nullptr, out);
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
    case TierBlockCheck::bad_header: return "damaged header";
  }
  return "unknown";
}

TierBlockCheck decode_tier_block(std::span<const std::byte> value, const TierBlockIdentity& expected,
                                 TierBlockView* view) noexcept {
  if (value.size() < kTierHeaderBytes) return TierBlockCheck::too_short;
  const std::byte* h = value.data();
  if (get<std::uint32_t>(h + 0) != kMagic) return TierBlockCheck::bad_magic;
  if (get<std::uint16_t>(h + 4) != kTierFormatVersion) return TierBlockCheck::wrong_version;
  if (get<std::uint16_t>(h + 6) != kTierHeaderBytes) return TierBlockCheck::wrong_version;
  if (get<std::uint64_t>(h + 8) != expected.model_identity) return TierBlockCheck::wrong_model;
  const Geometry& g = expected.geometry;
  if (get<std::uint32_t>(h + 16) != g.dense_layers || get<std::uint32_t>(h + 20) != g.kv_heads ||
      get<std::uint32_t>(h + 24) != g.head_dim || get<std::uint8_t>(h + 28) != static_cast<std::uint8_t>(g.dtype) ||
      get<std::uint32_t>(h + 64) != g.kinds.window_tokens || get<std::uint32_t>(h + 68) != g.window_layers() ||
      get<std::uint64_t>(h + 72) != kinds_hash(g) || get<std::uint64_t>(h + 80) != g.recurrent_state_bytes) {
    return TierBlockCheck::wrong_geometry;
  }
  if (get<std::uint32_t>(h + 32) != expected.token_count || get<std::uint32_t>(h + 36) != expected.block_index ||
      get<std::uint64_t>(h + 40) != expected.chain_hash) {
    return TierBlockCheck::wrong_key;
  }
  if (get<std::uint32_t>(h + 92) != static_cast<std::uint32_t>(tier_checksum({h, 92}))) return TierBlockCheck::bad_header;
  const std::uint8_t flags = get<std::uint8_t>(h + 29);
  const std::uint32_t window_from = get<std::uint32_t>(h + 88);
  if ((flags & ~kTierFlagState) != 0 || ((flags & kTierFlagState) != 0 && g.recurrent_state_bytes == 0) ||
      window_from > expected.token_count) {
    return TierBlockCheck::wrong_size;
  }
  const TierBlockContent content{window_from, (flags & kTierFlagState) != 0};
  const std::uint64_t payload_bytes = get<std::uint64_t>(h + 48);
  const std::uint64_t want = tier_block_bytes(g, expected.token_count, content) - kTierHeaderBytes;
  if (payload_bytes != want || value.size() != kTierHeaderBytes + want) return TierBlockCheck::wrong_size;
  const std::span<const std::byte> payload = value.subspan(kTierHeaderBytes);
  if (get<std::uint64_t>(h + 56) != tier_checksum(payload)) return TierBlockCheck::bad_checksum;
  if (view != nullptr) {
    view->payload = payload;
    view->window_from = window_from;
    view->state = content.state ? payload.last(g.recurrent_state_bytes) : std::span<const std::byte>{};
  }
  return TierBlockCheck::ok;
}

std::span<const std::byte> tier_block_layer(const TierBlockView& view, const Geometry& geometry,
                                            std::uint32_t token_count, std::uint32_t layer) noexcept {
  AK_ASSERT(layer < geometry.dense_layers, "tier block: layer outside the geometry");
  const std::uint64_t row = geometry.row_bytes();
  const std::uint32_t window_rows = token_count - view.window_from;
  const std::uint32_t windows_below = geometry.kinds.window_layers_below(layer);
  const std::uint64_t offset = (std::uint64_t{layer - windows_below} * token_count + std::uint64_t{windows_below} * window_rows) * row;
  const std::uint64_t rows = geometry.kinds.is_window(layer) ? window_rows : token_count;
  AK_ASSERT(offset + rows * row <= view.payload.size(), "tier block: a decoded payload");
  return view.payload.subspan(offset, rows * row);
}

std::span<const std::byte> tier_block_layer(std::span<const std::byte> payload, const Geometry& geometry,
                                            std::uint32_t token_count, std::uint32_t layer) noexcept {
  return tier_block_layer(TierBlockView{payload, 0, {}}, geometry, token_count, layer);
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
