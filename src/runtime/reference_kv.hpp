// reference_kv.hpp — the oracle: a plain, contiguous KV history and attention
// written straight from the layout contract, with no pages on a device, no
// tiles, no fences.
//
// What it owns: for each context and dense layer, every row ever appended,
// encoded in the geometry's dtype exactly as the runtime encodes it (so the
// attention both compute reads the same K/V values). It computes attention
// the way the contract states it: per page of P tokens, in ascending token
// order, into a partial (max m, sum s, acc[head_dim]) in fp32; partials merged
// in ascending page order; out = acc / s. A second, independent path
// (attend_naive: a two-pass softmax in double over all visible keys) checks
// the first within a tolerance.
//
// Why it exists: tests compare the runtime (through any backend, any device
// budget, any policy) against this, and compare host rows written back by the
// runtime against encoded_row() byte for byte. It allocates freely; it is a
// test oracle, never on a step path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "activekv/geometry.hpp"

namespace activekv::runtime {

class ReferenceKv {
 public:
  // q_heads must be a multiple of geometry.kv_heads; page_tokens ≥ 1.
  ReferenceKv(const Geometry& geometry, std::uint32_t q_heads, std::uint32_t page_tokens);

  // A new, empty context; returns its index (0, 1, 2, ...).
  std::uint32_t open();
  std::uint32_t contexts() const noexcept { return static_cast<std::uint32_t>(rows_.size()); }
  std::uint32_t length(std::uint32_t context) const;

  // Appends n rows to one dense layer: k and v are n × kv_heads × head_dim fp32,
  // token-major then head-major. Every layer of a context must be appended the
  // same number of rows before length() moves; length() is layer 0's count.
  void append(std::uint32_t context, std::uint32_t layer, const float* k, const float* v, std::uint32_t n);

  // The encoded row (row_bytes, K then V) of token t in layer l.
  std::span<const std::byte> encoded_row(std::uint32_t context, std::uint32_t layer, std::uint32_t token) const;

  // Causal attention for n queries at positions first_position .. first_position + n − 1
  // (each sees keys at positions ≤ its own; in a window layer of W, keys > its position − W). q: n × q_heads × head_dim; out the same shape.
  // Paged, per the layout contract.
  // pages_read (sparse attention): empty = every page; else page g is read by the query heads of
  // KV head k iff bit k of pages_read[g] is set (per-KV-head page lists; all bits: every head).
  void attend(std::uint32_t context, std::uint32_t layer, const float* q, std::uint32_t n,
              std::uint32_t first_position, float* out, std::span<const std::uint32_t> pages_read = {}) const;
  // The same, as a plain two-pass softmax in double: an independent check of attend().
  void attend_naive(std::uint32_t context, std::uint32_t layer, const float* q, std::uint32_t n,
                    std::uint32_t first_position, float* out) const;

  // The first key position a query at `position` sees in `layer` (0 in a full layer).
  std::uint32_t first_seen(std::uint32_t layer, std::uint32_t position) const noexcept;
  const Geometry& geometry() const noexcept { return geometry_; }
  std::uint32_t q_heads() const noexcept { return q_heads_; }

 private:
  // Decoded K (or V) of token t, kv head h: head_dim floats.
  void decode_head(std::uint32_t context, std::uint32_t layer, std::uint32_t token, std::uint32_t kv_head,
                   bool value, float* out) const;

  Geometry geometry_;
  std::uint32_t q_heads_;
  std::uint32_t page_tokens_;
  // rows_[context][layer]: row_bytes × tokens, contiguous.
  std::vector<std::vector<std::vector<std::byte>>> rows_;
};

}  // namespace activekv::runtime
