// tier_block.hpp — one block of KV history as the shared tier stores it: its key and its bytes.
//
// A block is `block_tokens` consecutive tokens of one history (a whole number
// of pages, starting at a multiple of block_tokens). Its key names everything
// the rows depend on, so two servers compute the same key for the same rows
// and no server can read rows that are not its own:
//
//   key = "akv:" model identity ":" geometry ":" chain hash       (hex)
//   chain hash = the local prefix index's chain (prefix_index.hpp) at the
//                block's last page, so it names the block AND every token before it
//
// The value (format 2) is a fixed 96-byte header, then the payload: for every dense
// layer l in order, the block's rows exactly as the host pool lays a segment out, so a restore is
// one copy per layer into a free history (host_pool.hpp "segment_offset + t × row_bytes"):
//   full layer    token_count rows (tokens 0 .. token_count − 1 of the block)
//   window layer  token_count − window_from rows (tokens window_from .. token_count − 1): only
//                 the rows the writer's host ring still held (memory_plan.hpp), page-aligned
// then, when the state flag is set, the recurrent state at the block's end (state bytes): the
// state after its last token, from a checkpoint the writing history held at that position.
//
//   offset  size  field
//        0     4  magic "AKVT"
//        4     2  format version (kTierFormatVersion)
//        6     2  header bytes (96)
//        8     8  model identity
//       16     4  dense layers       20  4  kv heads      24  4  head dim
//       28     1  dtype              29  1  flags (bit 0: the state follows the rows)   30  2  zero
//       32     4  token count        36  4  block index (first token / block_tokens)
//       40     8  chain hash         48  8  payload bytes
//       56     8  payload checksum (tier_checksum of the payload)
//       64     4  window tokens W (0: no window layers)     68  4  window layers
//       72     8  layer-kind hash (which dense layers are window layers)
//       80     8  state bytes (the geometry's recurrent_state_bytes; 0: not a hybrid)
//       88     4  window_from (block-relative; token_count: no window rows)
//       92     4  header checksum (low 32 bits of tier_checksum of bytes 0..91)
//
// All integers little-endian. decode_tier_block() refuses anything that does
// not match what the reader expects — a short value, a wrong magic, another
// format version (format 1 included: its blocks carry neither window rows nor
// states, see docs/TIER.md), another model, another geometry or layer kinds,
// another key, a damaged header, a payload of the wrong size or checksum — and
// the caller counts each refusal as a miss: a refused block is never used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "activekv/geometry.hpp"

namespace activekv::tier {

inline constexpr std::uint16_t kTierFormatVersion = 2;
inline constexpr std::size_t kTierHeaderBytes = 96;
inline constexpr std::uint8_t kTierFlagState = 1;

// What a block must be to be used: the reader's model and geometry, the key's chain hash.
struct TierBlockIdentity {
  std::uint64_t model_identity = 0;
  Geometry geometry{};
  std::uint32_t token_count = 0;     // block_tokens
  std::uint32_t block_index = 0;
  std::uint64_t chain_hash = 0;
};

// What a value carries besides its full layers' rows.
struct TierBlockContent {
  std::uint32_t window_from = 0;     // block-relative first token whose window-layer rows are carried
  bool state = false;                // the recurrent state at the block's end follows the rows
};

// Bytes of a whole value: header + full_layers × token_count × row_bytes
//   + window_layers × (token_count − window_from) × row_bytes + (state ? recurrent_state_bytes : 0).
std::uint64_t tier_block_bytes(const Geometry& geometry, std::uint32_t token_count, TierBlockContent content) noexcept;
// Every row and, for a hybrid, the state: the largest value (the writer's buffer).
std::uint64_t tier_block_bytes_max(const Geometry& geometry, std::uint32_t token_count) noexcept;
// Every row, no state (a dense model's block).
inline std::uint64_t tier_block_bytes(const Geometry& geometry, std::uint32_t token_count) noexcept {
  return tier_block_bytes(geometry, token_count, TierBlockContent{});
}

// A 64-bit checksum of `bytes` (word-wise multiply-mix; catches flipped and swapped bytes).
std::uint64_t tier_checksum(std::span<const std::byte> bytes) noexcept;

// A hash of the geometry fields a block's rows depend on (layers, heads, head dim, dtype).
std::uint64_t tier_geometry_hash(const Geometry& geometry) noexcept;

// "akv:<model>:<geometry>:<chain>", 16 hex digits each.
std::string tier_block_key(std::uint64_t model_identity, const Geometry& geometry, std::uint64_t chain_hash);
// The same key written into `out` without allocating (the write-behind path); returns its length.
inline constexpr std::size_t kTierKeyBytes = 54;  // "akv:" + 3 × 16 hex digits + 2 colons
std::size_t tier_block_key_to(std::span<char, kTierKeyBytes> out, std::uint64_t model_identity, const Geometry& geometry,
                              std::uint64_t chain_hash) noexcept;

// Where a block's rows are read from: one dense layer's host share, a segment (token t at
// base + (t − first_token) × row_bytes) or a ring (token t at base + (t mod ring_tokens) × row_bytes).
struct TierRowSource {
  const std::byte* base = nullptr;
  std::uint32_t ring_tokens = 0;     // 0: a segment
  std::uint32_t first_token = 0;     // a segment's token at base (0: a whole history's segment)
};

// Writes the header and payload into `out` (at least tier_block_bytes(…, content) long) from the
// history's layers (`layers[l]`, the block's first token at id.block_index × token_count) and,
// with content.state, `state` (recurrent_state_bytes). Returns the value's bytes. Does not allocate.
std::size_t encode_tier_block(const TierBlockIdentity& id, std::span<const TierRowSource> layers,
                              TierBlockContent content, const std::byte* state, std::span<std::byte> out) noexcept;
// Every row, no state: `layer_rows[l]` holds layer l's token_count rows (exactly tier_block_bytes long).
void encode_tier_block(const TierBlockIdentity& id, std::span<const std::span<const std::byte>> layer_rows,
                       std::span<std::byte> out) noexcept;

enum class TierBlockCheck : std::uint8_t {
  ok,
  too_short,        // shorter than the header
  bad_magic,
  wrong_version,
  wrong_model,
  wrong_geometry,   // layers, heads, head dim or dtype differ
  wrong_key,        // token count, block index or chain hash differ from the key asked for
  wrong_size,       // payload bytes disagree with the geometry, window_from, the state flag or the value's length
  bad_checksum,     // the payload's
  bad_header,       // the header's checksum: a damaged header
};
const char* tier_block_check_name(TierBlockCheck check) noexcept;

// A checked value's parts.
struct TierBlockView {
  std::span<const std::byte> payload;  // rows (layer-major, window layers from window_from) then the state
  std::uint32_t window_from = 0;
  std::span<const std::byte> state;    // empty without one
};

// Checks `value` against `expected`; on ok, `view` (when not null) describes its parts.
TierBlockCheck decode_tier_block(std::span<const std::byte> value, const TierBlockIdentity& expected,
                                 TierBlockView* view) noexcept;

// Layer l's rows within a decoded block: tokens [first, token_count) of the block, first = 0 for a
// full layer and window_from for a window layer.
std::span<const std::byte> tier_block_layer(const TierBlockView& view, const Geometry& geometry,
                                            std::uint32_t token_count, std::uint32_t layer) noexcept;
// Layer l's rows within the payload of a block that carries every row (window_from 0).
std::span<const std::byte> tier_block_layer(std::span<const std::byte> payload, const Geometry& geometry,
                                            std::uint32_t token_count, std::uint32_t layer) noexcept;

}  // namespace activekv::tier

namespace activekv::tier {

// The chain hash of each whole block of `tokens` (tokens.size() / block_tokens of them, at
// most out.size()), by the prefix index's page chain; returns how many it wrote.
// block_tokens must be a whole number of page_tokens. Does not allocate.
std::uint32_t tier_block_chain(std::span<const std::int32_t> tokens, std::uint32_t page_tokens,
                               std::uint32_t block_tokens, std::uint64_t model_identity,
                               std::span<std::uint64_t> out) noexcept;

}  // namespace activekv::tier
