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
// The value is a fixed 64-byte header, then the payload: for every dense
// layer l in order, the block's rows (token_count × row_bytes) exactly as the
// host pool lays a segment out, so a restore is one copy per layer into a
// free history (host_pool.hpp "segment_offset + t × row_bytes").
//
//   offset  size  field
//        0     4  magic "AKVT"
//        4     2  format version (kTierFormatVersion)
//        6     2  header bytes (64)
//        8     8  model identity
//       16     4  dense layers       20  4  kv heads      24  4  head dim
//       28     1  dtype              29  3  zero
//       32     4  token count        36  4  block index (first token / block_tokens)
//       40     8  chain hash         48  8  payload bytes
//       56     8  payload checksum (tier_checksum of the payload)
//
// All integers little-endian. decode_tier_block() refuses anything that does
// not match what the reader expects — a short value, a wrong magic, another
// format version, another model, another geometry, another key, a payload of
// the wrong size or checksum — and the caller counts each refusal as a miss:
// a refused block is never used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "activekv/geometry.hpp"

namespace activekv::tier {

inline constexpr std::uint16_t kTierFormatVersion = 1;
inline constexpr std::size_t kTierHeaderBytes = 64;

// What a block must be to be used: the reader's model and geometry, the key's chain hash.
struct TierBlockIdentity {
  std::uint64_t model_identity = 0;
  Geometry geometry{};
  std::uint32_t token_count = 0;     // block_tokens
  std::uint32_t block_index = 0;
  std::uint64_t chain_hash = 0;
};

// Bytes of a whole value: header + dense_layers × token_count × row_bytes.
std::uint64_t tier_block_bytes(const Geometry& geometry, std::uint32_t token_count) noexcept;

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

// Writes the header and payload into `out` (exactly tier_block_bytes long).
// `layer_rows[l]` holds layer l's token_count rows (token_count × row_bytes bytes).
// Does not allocate.
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
  wrong_size,       // payload bytes disagree with the geometry or the value's length
  bad_checksum,
};
const char* tier_block_check_name(TierBlockCheck check) noexcept;

// Checks `value` against `expected`; on ok, `payload` is the rows (layer-major).
TierBlockCheck decode_tier_block(std::span<const std::byte> value, const TierBlockIdentity& expected,
                                 std::span<const std::byte>* payload) noexcept;

// Layer l's rows within a decoded payload.
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
