// attention_reference.hpp — a plain CPU reference for exact paged attention,
// and random page-table layouts, for the GPU backends' tests.
//
// The reference is deliberately independent of the kernels' structure: it
// gathers every visible key of a (query, head) from the page table, takes one
// global maximum, and sums in double precision. The kernels work per page in
// fp32 and merge partials, so they agree with it to a tolerance (stated by the
// tests), not bit for bit. Bit identity is checked between layouts on one
// backend instead.
//
// Layouts: the same logical pages (tokens [k·P, (k+1)·P) of one context and one
// layer) are placed either all in the "page pool" region of the arena, or
// mixed — a random subset in the pool (permuted slots) and runs of the rest in
// a "tile" region (T/P pages contiguous per tile). The bytes of each page are
// identical in both layouts.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "activekv/backend.hpp"

namespace activekv::gpu_testing {

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float value;
  if (exponent == 0) value = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31) value = mantissa ? NAN : INFINITY;
  else value = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  return sign ? -value : value;
}

// Exact for |value| in the normal f16 range after rounding to 1/1024 relative: tests
// only ever store values produced here, so the round trip is what counts.
inline std::uint16_t float_to_half(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const float magnitude = std::fabs(value);
  if (magnitude < 6.1035156e-05f) return static_cast<std::uint16_t>(sign);  // flush tiny values to zero
  int exponent = 0;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction · 2^exponent, fraction in [0.5, 1)
  auto mantissa = static_cast<std::uint32_t>(std::lround(fraction * 2048.0f));  // 11 significant bits
  if (mantissa == 2048) { mantissa = 1024; ++exponent; }
  const std::uint32_t biased = static_cast<std::uint32_t>(exponent - 1 + 15);
  return static_cast<std::uint16_t>(sign | (biased << 10) | (mantissa & 0x3ffu));
}

inline float load_element(const std::byte* row, std::uint64_t element, DType dtype) {
  switch (dtype) {
    case DType::f32: {
      float v;
      std::memcpy(&v, row + element * 4, 4);
      return v;
    }
    case DType::f16: {
      std::uint16_t h;
      std::memcpy(&h, row + element * 2, 2);
      return half_to_float(h);
    }
    case DType::bf16: {
      std::uint16_t h;
      std::memcpy(&h, row + element * 2, 2);
      const std::uint32_t bits = std::uint32_t{h} << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
  }
  return 0.0f;
}

inline void store_element(std::byte* row, std::uint64_t element, DType dtype, float value) {
  switch (dtype) {
    case DType::f32: std::memcpy(row + element * 4, &value, 4); return;
    case DType::f16: {
      const std::uint16_t h = float_to_half(value);
      std::memcpy(row + element * 2, &h, 2);
      return;
    }
    case DType::bf16: {
      std::uint32_t bits;
      std::memcpy(&bits, &value, 4);
      const auto h = static_cast<std::uint16_t>(bits >> 16);  // truncation: exact for what load returns
      std::memcpy(row + element * 2, &h, 2);
      return;
    }
  }
}

// out[query][head][d] for one task, from arena bytes and the task's pages.
inline void reference_attention(const std::vector<std::byte>& arena, const AttentionShape& shape,
                                const std::vector<AttentionPage>& pages, const std::vector<std::uint32_t>& positions,
                                const std::vector<float>& queries, std::vector<double>* out) {
  const std::uint32_t group = shape.q_heads / shape.kv_heads;
  const std::uint64_t row_bytes = shape.row_bytes();
  out->assign(positions.size() * shape.q_heads * shape.head_dim, 0.0);
  std::vector<double> scores;
  std::vector<const std::byte*> rows;
  for (std::size_t qi = 0; qi < positions.size(); ++qi) {
    for (std::uint32_t h = 0; h < shape.q_heads; ++h) {
      const std::uint32_t kvh = h / group;
      const float* q = &queries[(qi * shape.q_heads + h) * shape.head_dim];
      scores.clear();
      rows.clear();
      for (const AttentionPage& page : pages) {
        for (std::uint32_t r = 0; r < page.tokens; ++r) {
          if (page.first_token + r > positions[qi]) break;
          const std::byte* row = arena.data() + page.arena_offset + r * row_bytes;
          double dot = 0.0;
          for (std::uint32_t d = 0; d < shape.head_dim; ++d) {
            dot += double{q[d]} * load_element(row, std::uint64_t{kvh} * shape.head_dim + d, shape.dtype);
          }
          scores.push_back(dot * shape.scale);
          rows.push_back(row);
        }
      }
      if (scores.empty()) continue;
      double m = scores[0];
      for (double s : scores) m = std::max(m, s);
      double sum = 0.0;
      double* o = &(*out)[(qi * shape.q_heads + h) * shape.head_dim];
      for (std::size_t i = 0; i < scores.size(); ++i) {
        const double w = std::exp(scores[i] - m);
        sum += w;
        for (std::uint32_t d = 0; d < shape.head_dim; ++d) {
          o[d] += w * load_element(rows[i], std::uint64_t{shape.kv_heads} * shape.head_dim + std::uint64_t{kvh} * shape.head_dim + d,
                                   shape.dtype);
        }
      }
      for (std::uint32_t d = 0; d < shape.head_dim; ++d) o[d] /= sum;
    }
  }
}

// One logical context: `tokens` rows of random K/V, pages of P rows.
struct Layouts {
  std::vector<std::byte> resident;        // arena image: every page in the pool region
  std::vector<std::byte> mixed;           // arena image: pool pages and tile pages mixed
  std::vector<AttentionPage> resident_pages;
  std::vector<AttentionPage> mixed_pages;
};

// Arena: [tile region: tiles × T rows][pool region: pool_pages × P rows].
inline Layouts make_layouts(std::mt19937_64& rng, const AttentionShape& shape, std::uint32_t tokens,
                            std::uint32_t page_tokens, std::uint32_t tile_tokens) {
  const std::uint64_t row_bytes = shape.row_bytes();
  const std::uint32_t pages = (tokens + page_tokens - 1) / page_tokens;
  const std::uint32_t pages_per_tile = tile_tokens / page_tokens;
  const std::uint32_t tiles = (pages + pages_per_tile - 1) / pages_per_tile;
  const std::uint64_t page_bytes = std::uint64_t{page_tokens} * row_bytes;
  const std::uint64_t tiles_offset = 0;
  const std::uint64_t pool_offset = std::uint64_t{tiles} * tile_tokens * row_bytes;
  const std::uint32_t pool_pages = pages + 3;  // spare slots so the mixed layout permutes
  const std::uint64_t arena_bytes = pool_offset + std::uint64_t{pool_pages} * page_bytes;

  // The logical rows.
  std::vector<std::byte> logical(std::uint64_t{pages} * page_bytes);
  std::uniform_real_distribution<float> value(-1.5f, 1.5f);
  const std::uint64_t elements = 2ull * shape.kv_heads * shape.head_dim;
  for (std::uint32_t t = 0; t < tokens; ++t) {
    for (std::uint64_t e = 0; e < elements; ++e) store_element(logical.data() + t * row_bytes, e, shape.dtype, value(rng));
  }

  Layouts layouts;
  layouts.resident.assign(arena_bytes, std::byte{0});
  layouts.mixed.assign(arena_bytes, std::byte{0});
  std::vector<std::uint32_t> slots(pool_pages);
  for (std::uint32_t i = 0; i < pool_pages; ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), rng);
  std::bernoulli_distribution staged(0.5);
  std::uint32_t tile_cursor = 0;  // next free page position inside the tile region
  for (std::uint32_t k = 0; k < pages; ++k) {
    const std::uint32_t rows = std::min(page_tokens, tokens - k * page_tokens);
    const std::byte* src = logical.data() + std::uint64_t{k} * page_bytes;
    const std::uint64_t resident_at = pool_offset + std::uint64_t{k} * page_bytes;
    std::memcpy(layouts.resident.data() + resident_at, src, rows * row_bytes);
    layouts.resident_pages.push_back({resident_at, k * page_tokens, rows});
    std::uint64_t mixed_at;
    if (staged(rng) && tile_cursor < tiles * pages_per_tile) {
      mixed_at = tiles_offset + std::uint64_t{tile_cursor++} * page_bytes;
    } else {
      mixed_at = pool_offset + std::uint64_t{slots[k]} * page_bytes;
    }
    std::memcpy(layouts.mixed.data() + mixed_at, src, rows * row_bytes);
    layouts.mixed_pages.push_back({mixed_at, k * page_tokens, rows});
  }
  return layouts;
}

}  // namespace activekv::gpu_testing
