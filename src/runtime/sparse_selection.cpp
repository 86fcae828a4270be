// sparse_selection.cpp — see sparse_selection.hpp.
#include "runtime/sparse_selection.hpp"
#include "core/cpu_features.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "activekv/assert.hpp"
#include "activekv/huge_pages.hpp"
#include "runtime/element_codec.hpp"

namespace activekv::runtime {

SummaryFormat summary_format_for(DType kv_dtype) noexcept {
  return kv_dtype == DType::f16 ? SummaryFormat::f16 : SummaryFormat::bf16;
}

bool summary_stores_dtype(SummaryFormat format, DType kv_dtype) noexcept {
  return (format == SummaryFormat::f16 && kv_dtype == DType::f16) ||
         (format == SummaryFormat::bf16 && kv_dtype == DType::bf16);
}

float summary_decode(SummaryFormat format, std::uint16_t bits) noexcept {
  return format == SummaryFormat::f16 ? f16_to_f32(bits) : bf16_to_f32(bits);
}

namespace {

// The next stored value above (+1) or below (−1) a non-NaN encoding, in sign-magnitude order;
// ±0 step to the smallest subnormal of the other side's sign.
std::uint16_t step(std::uint16_t bits, int direction) noexcept {
  const bool negative = (bits & 0x8000u) != 0;
  const std::uint16_t magnitude = bits & 0x7fffu;
  if (magnitude == 0) return direction > 0 ? std::uint16_t{0x0001} : std::uint16_t{0x8001};
  // Away from zero when the direction matches the sign, else towards it.
  const bool away = (direction > 0) != negative;
  return static_cast<std::uint16_t>(away ? bits + 1u : bits - 1u);
}

std::uint16_t nearest(SummaryFormat format, float value) noexcept {
  return format == SummaryFormat::f16 ? f32_to_f16(value) : f32_to_bf16(value);
}

// A total order of the (non-NaN) encodings that agrees with their values: the min and max of
// the stored values are taken on it.
std::uint16_t ordered(std::uint16_t bits) noexcept {
  return (bits & 0x8000u) != 0 ? static_cast<std::uint16_t>(~bits) : static_cast<std::uint16_t>(bits | 0x8000u);
}

}  // namespace

std::uint16_t summary_round_down(SummaryFormat format, float value) noexcept {
  const std::uint16_t bits = nearest(format, value);
  return summary_decode(format, bits) > value ? step(bits, -1) : bits;
}

std::uint16_t summary_round_up(SummaryFormat format, float value) noexcept {
  const std::uint16_t bits = nearest(format, value);
  return summary_decode(format, bits) < value ? step(bits, +1) : bits;
}

PageSummaries::PageSummaries(const SummaryShape& shape) : shape_(shape) {
  data_.resize(shape.elements());
  // The bound streams a layer's summaries every decode step: 2 MiB pages where the kernel gives
  // them (activekv/huge_pages.hpp; advice only, no byte changes).
  collapse_huge_pages(data_.data(), data_.size() * sizeof(std::uint16_t));
}

const std::uint16_t* PageSummaries::page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept {
  return const_cast<PageSummaries*>(this)->at(slot, layer, logical);
}

std::uint64_t PageSummaries::page_offset(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept {
  return static_cast<std::uint64_t>(page(slot, layer, logical) - data_.data()) * sizeof(std::uint16_t);
}

std::span<const std::byte> PageSummaries::bytes() const noexcept {
  return std::as_bytes(std::span<const std::uint16_t>(data_));
}

std::uint16_t* PageSummaries::at(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept {
  AK_ASSERT(slot < shape_.slots && layer < shape_.layers && logical < shape_.pages_max,
            "page summaries: page out of range");
  return data_.data() + ((std::size_t{slot} * shape_.layers + layer) * shape_.pages_max + logical) * shape_.page_elements();
}

namespace {
void empty_summary(std::uint16_t* s, const SummaryShape& shape) noexcept {
  const std::uint32_t d = shape.head_dim;
  const bool f16 = shape.format == SummaryFormat::f16;
  const std::uint16_t plus_inf = f16 ? 0x7c00u : 0x7f80u, minus_inf = f16 ? 0xfc00u : 0xff80u;
  for (std::uint32_t h = 0; h < shape.kv_heads; ++h, s += 2u * d) {
    std::fill_n(s, d, plus_inf);
    std::fill_n(s + d, d, minus_inf);
  }
}

// lo and hi (one key dimension, stored bits) join a summary's min and max.
inline void widen(std::uint16_t* min, std::uint16_t* max, std::uint16_t lo, std::uint16_t hi) noexcept {
  if (ordered(lo) < ordered(*min)) *min = lo;
  if (ordered(hi) > ordered(*max)) *max = hi;
}
}  // namespace

void PageSummaries::clear(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept {
  empty_summary(at(slot, layer, logical), shape_);
}

void PageSummaries::add(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const float* key) noexcept {
  std::uint16_t* s = at(slot, layer, logical);
  const std::uint32_t d = shape_.head_dim;
  const SummaryFormat f = shape_.format;
  for (std::uint32_t h = 0; h < shape_.kv_heads; ++h, s += 2u * d, key += d) {
    for (std::uint32_t i = 0; i < d; ++i) {
      const std::uint16_t bits = nearest(f, key[i]);
      const float back = summary_decode(f, bits);
      const std::uint16_t lo = back > key[i] ? step(bits, -1) : bits, hi = back < key[i] ? step(bits, +1) : bits;
      widen(s + i, s + d + i, lo, hi);
    }
  }
}

void PageSummaries::add_stored(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical,
                               const std::byte* key) noexcept {
  std::uint16_t* s = at(slot, layer, logical);
  const std::uint32_t d = shape_.head_dim;
  for (std::uint32_t h = 0; h < shape_.kv_heads; ++h, s += 2u * d) {
    for (std::uint32_t i = 0; i < d; ++i, key += sizeof(std::uint16_t)) {
      std::uint16_t bits;
      std::memcpy(&bits, key, sizeof bits);
      widen(s + i, s + d + i, bits, bits);
    }
  }
}

namespace {
constexpr std::uint32_t lanes = 8;

// The lanes summed as a tree: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
float lane_sum(const float* a) noexcept {
  const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}
}  // namespace

float page_bound(const float* q, const float* summary_min, const float* summary_max, std::uint32_t dim) noexcept {
  float acc[lanes] = {};
  for (std::uint32_t i = 0; i < dim; ++i) {
    const float qp = std::max(q[i], 0.0f), qn = std::min(q[i], 0.0f);
    acc[i % lanes] += qp * summary_max[i] + qn * summary_min[i];
  }
  return lane_sum(acc);
}

void split_query(const float* q, std::uint32_t dim, float* positive, float* negative) noexcept {
  for (std::uint32_t i = 0; i < dim; ++i) {
    positive[i] = std::max(q[i], 0.0f);
    negative[i] = std::min(q[i], 0.0f);
  }
}

namespace {

constexpr std::uint32_t dim_max = 1024;  // the portable path decodes a head's summary on the stack

void page_bounds_portable(SummaryFormat format, const float* positive, const float* negative, std::uint32_t heads,
                          const std::uint16_t* first, std::size_t stride, std::uint32_t count, std::uint32_t dim,
                          float* out) noexcept {
  float mn[dim_max], mx[dim_max];
  for (std::uint32_t p = 0; p < count; ++p) {
    const std::uint16_t* s = first + p * stride;
    for (std::uint32_t i = 0; i < dim; ++i) {
      mn[i] = summary_decode(format, s[i]);
      mx[i] = summary_decode(format, s[dim + i]);
    }
    float best = -std::numeric_limits<float>::infinity();
    for (std::uint32_t h = 0; h < heads; ++h) {
      const float* qp = positive + std::size_t{h} * dim;
      const float* qn = negative + std::size_t{h} * dim;
      float acc[lanes] = {};
      for (std::uint32_t i = 0; i < dim; ++i) acc[i % lanes] += qp[i] * mx[i] + qn[i] * mn[i];
      best = std::max(best, lane_sum(acc));
    }
    out[p] = best;
  }
}

// The same operations, 8 lanes per instruction (no FMA: each product rounds, as above); the
// stored halves widen exactly (F16C for f16, a shift for bf16).
__attribute__((target("avx2,f16c"))) inline __m256 load_summary(SummaryFormat format, const std::uint16_t* s) noexcept {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  if (format == SummaryFormat::f16) return _mm256_cvtph_ps(half);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

__attribute__((target("avx2,f16c"))) inline float tree_sum(__m256 acc) noexcept {
  // The tree: (l0 + l4, l1 + l5, l2 + l6, l3 + l7), then (s0 + s2, s1 + s3), then their sum.
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// `Heads` query heads at once (their accumulators in registers, independent chains), each
// summary vector widened once for all of them.
template <SummaryFormat format, std::uint32_t Heads>
__attribute__((target("avx2,f16c"))) void page_bounds_heads(const float* positive, const float* negative,
                                                            const std::uint16_t* first, std::size_t stride,
                                                            std::uint32_t count, std::uint32_t dim,
                                                            float* out) noexcept {
  // Each page's summary is fetched `ahead` pages early (the hardware prefetcher follows a short
  // stride, but not when `stride` is large, as in a test's table). Prefetching changes no arithmetic.
  constexpr std::uint32_t ahead = 8;
  const std::size_t summary_bytes = std::size_t{dim} * 2u * sizeof(std::uint16_t);
  for (std::uint32_t p = 0; p < count; ++p) {
    const std::uint16_t* s = first + p * stride;
    if (p + ahead < count) {
      const char* next = reinterpret_cast<const char*>(first + (p + ahead) * stride);
      for (std::size_t b = 0; b < summary_bytes; b += 64) _mm_prefetch(next + b, _MM_HINT_T0);
    }
    __m256 acc[Heads];
    for (std::uint32_t h = 0; h < Heads; ++h) acc[h] = _mm256_setzero_ps();
    for (std::uint32_t i = 0; i < dim; i += lanes) {
      const __m256 mn = load_summary(format, s + i), mx = load_summary(format, s + dim + i);
      for (std::uint32_t h = 0; h < Heads; ++h) {
        const __m256 hi = _mm256_mul_ps(_mm256_loadu_ps(positive + std::size_t{h} * dim + i), mx);
        const __m256 lo = _mm256_mul_ps(_mm256_loadu_ps(negative + std::size_t{h} * dim + i), mn);
        acc[h] = _mm256_add_ps(acc[h], _mm256_add_ps(hi, lo));
      }
    }
    float best = -std::numeric_limits<float>::infinity();
    for (std::uint32_t h = 0; h < Heads; ++h) best = std::max(best, tree_sum(acc[h]));
    out[p] = best;
  }
}

// Any number of heads: in blocks of 4, then the rest, the maximum taken in head order (max is
// exact, so the blocks change nothing).
template <SummaryFormat format>
__attribute__((target("avx2,f16c"))) void page_bounds_avx2(const float* positive, const float* negative,
                                                           std::uint32_t heads, const std::uint16_t* first,
                                                           std::size_t stride, std::uint32_t count, std::uint32_t dim,
                                                           float* out) noexcept {
  switch (heads) {
    case 1: return page_bounds_heads<format, 1>(positive, negative, first, stride, count, dim, out);
    case 2: return page_bounds_heads<format, 2>(positive, negative, first, stride, count, dim, out);
    case 3: return page_bounds_heads<format, 3>(positive, negative, first, stride, count, dim, out);
    case 4: return page_bounds_heads<format, 4>(positive, negative, first, stride, count, dim, out);
    default: break;
  }
  page_bounds_heads<format, 4>(positive, negative, first, stride, count, dim, out);
  constexpr std::size_t block_max = 256;
  float block[block_max];
  for (std::uint32_t h = 4; h < heads; h += 4) {
    const std::uint32_t n = std::min(4u, heads - h);
    const float* qp = positive + std::size_t{h} * dim;
    const float* qn = negative + std::size_t{h} * dim;
    for (std::uint32_t p0 = 0; p0 < count; p0 += block_max) {
      const std::uint32_t c = std::min<std::uint32_t>(block_max, count - p0);
      const std::uint16_t* f = first + p0 * stride;
      switch (n) {
        case 1: page_bounds_heads<format, 1>(qp, qn, f, stride, c, dim, block); break;
        case 2: page_bounds_heads<format, 2>(qp, qn, f, stride, c, dim, block); break;
        case 3: page_bounds_heads<format, 3>(qp, qn, f, stride, c, dim, block); break;
        default: page_bounds_heads<format, 4>(qp, qn, f, stride, c, dim, block); break;
      }
      for (std::uint32_t p = 0; p < c; ++p) out[p0 + p] = std::max(out[p0 + p], block[p]);
    }
  }
}

const bool has_avx2 = __builtin_cpu_supports("avx2") && activekv::cpu_has_f16c();

}  // namespace

bool page_bounds_vectorised(std::uint32_t dim) noexcept {
  return has_avx2 && dim % lanes == 0 && dim <= dim_max;
}

void page_bounds(SummaryFormat format, const float* positive, const float* negative, std::uint32_t heads,
                 const std::uint16_t* first, std::size_t stride, std::uint32_t count, std::uint32_t dim, float* out,
                 BoundIsa isa) noexcept {
  AK_ASSERT(dim <= dim_max, "sparse bound: head_dim above the supported maximum");
  if (isa == BoundIsa::best && page_bounds_vectorised(dim)) {
    if (format == SummaryFormat::f16) {
      page_bounds_avx2<SummaryFormat::f16>(positive, negative, heads, first, stride, count, dim, out);
    } else {
      page_bounds_avx2<SummaryFormat::bf16>(positive, negative, heads, first, stride, count, dim, out);
    }
    return;
  }
  page_bounds_portable(format, positive, negative, heads, first, stride, count, dim, out);
}

float lane_dot(const float* q, const float* k, std::uint32_t dim) noexcept {
  float acc[lanes] = {};
  for (std::uint32_t i = 0; i < dim; ++i) acc[i % lanes] += q[i] * k[i];
  return lane_sum(acc);
}

namespace {
// The first `fill` of `count` pages in `order` become the best by bound, best first (ties: lower
// page) — the same as partial_sort, since the order is total: the fill-th page is found in linear
// time and only the pages before it are sorted.
void top_first(std::uint32_t* order, std::uint32_t fill, std::uint32_t count, const float* bound) noexcept {
  const auto better = [bound](std::uint32_t a, std::uint32_t b) {
    return bound[a] > bound[b] || (bound[a] == bound[b] && a < b);
  };
  if (fill < count) std::nth_element(order, order + fill, order + count, better);
  std::sort(order, order + fill, better);
}
}  // namespace

SelectionScratch::SelectionScratch(std::uint32_t groups_max, std::uint32_t pages_max)
    : order(std::size_t{groups_max} * pages_max),
      rank(pages_max),
      group_rank(std::size_t{groups_max} * pages_max) {}

std::uint32_t select_pages(const SelectionInput& in, SelectionScratch& scratch,
                           std::span<std::uint32_t> selected) noexcept {
  const std::uint32_t n = in.pages;
  AK_ASSERT(n <= scratch.rank.size() && n <= selected.size(), "sparse selection: more pages than reserved");
  AK_ASSERT(std::size_t{in.groups} * n <= scratch.order.size(), "sparse selection: more groups than reserved");
  const std::size_t stride = in.bound_stride == 0 ? n : in.bound_stride;
  AK_ASSERT(stride >= n && in.bound.size() >= (std::size_t{in.groups} - 1) * stride + n,
            "sparse selection: a bound per group and page");
  std::uint32_t* rank = scratch.rank.data();
  if (in.budget >= n) {
    for (std::uint32_t p = 0; p < n; ++p) {
      rank[p] = rank_forced;
      selected[p] = p;
    }
    return n;
  }
  // Forced: the sink, the newest pages, the heavy hitters.
  std::uint32_t forced = 0;
  for (std::uint32_t p = 0; p < n; ++p) {
    const bool f = p == 0 || p + in.recent >= n || (!in.heavy.empty() && in.heavy[p] != 0);
    rank[p] = f ? rank_forced : UINT32_MAX;
    forced += f ? 1u : 0u;
  }
  const std::uint32_t fill = in.budget > forced ? in.budget - forced : 0u;
  if (fill > 0) {
    // Each group's candidates, best bound first (ties: lower page), the first `fill` sorted.
    const std::uint32_t candidates = n - forced;  // ≥ fill, since budget < n
    for (std::uint32_t g = 0; g < in.groups; ++g) {
      std::uint32_t* order = scratch.order.data() + std::size_t{g} * n;
      std::uint32_t c = 0;
      for (std::uint32_t p = 0; p < n; ++p) {
        if (rank[p] == UINT32_MAX) order[c++] = p;
      }
      top_first(order, fill, candidates, in.bound.data() + std::size_t{g} * stride);
    }
    // Round-robin over the groups' rankings: rank r of group 0, of group 1, ..., then r + 1.
    std::uint32_t taken = 0;
    for (std::uint32_t r = 0; r < fill && taken < fill; ++r) {
      for (std::uint32_t g = 0; g < in.groups && taken < fill; ++g) {
        const std::uint32_t p = scratch.order[std::size_t{g} * n + r];
        if (rank[p] == UINT32_MAX) rank[p] = taken++;
      }
    }
    AK_ASSERT(taken == fill, "sparse selection: the rankings must fill the budget");
  }
  std::uint32_t count = 0;
  for (std::uint32_t p = 0; p < n; ++p) {
    if (rank[p] != UINT32_MAX) selected[count++] = p;
  }
  return count;
}

std::uint32_t select_pages_per_group(const SelectionInput& in, SelectionScratch& scratch,
                                     std::span<std::uint32_t> heads) noexcept {
  const std::uint32_t n = in.pages;
  AK_ASSERT(n <= scratch.rank.size() && n <= heads.size(), "sparse selection: more pages than reserved");
  AK_ASSERT(in.groups >= 1 && in.groups <= 32, "sparse selection: per-group lists need 1 to 32 groups");
  AK_ASSERT(std::size_t{in.groups} * n <= scratch.group_rank.size(), "sparse selection: more groups than reserved");
  const std::size_t stride = in.bound_stride == 0 ? n : in.bound_stride;
  AK_ASSERT(stride >= n && in.bound.size() >= (std::size_t{in.groups} - 1) * stride + n,
            "sparse selection: a bound per group and page");
  const std::uint32_t all = in.groups == 32 ? UINT32_MAX : (1u << in.groups) - 1u;
  std::uint32_t* rank = scratch.rank.data();
  if (in.budget >= n) {
    for (std::uint32_t p = 0; p < n; ++p) {
      rank[p] = rank_forced;
      heads[p] = all;
    }
    std::fill_n(scratch.group_rank.data(), std::size_t{in.groups} * n, rank_forced);
    return n;
  }
  // Forced for every group: the sink, the newest pages, the heavy hitters.
  std::uint32_t forced = 0;
  for (std::uint32_t p = 0; p < n; ++p) {
    const bool f = p == 0 || p + in.recent >= n || (!in.heavy.empty() && in.heavy[p] != 0);
    rank[p] = f ? rank_forced : UINT32_MAX;
    heads[p] = f ? all : 0u;
    forced += f ? 1u : 0u;
  }
  const std::uint32_t fill = in.budget > forced ? in.budget - forced : 0u;
  const std::uint32_t candidates = n - forced;  // ≥ fill, since budget < n
  for (std::uint32_t g = 0; g < in.groups; ++g) {
    std::uint32_t* grank = scratch.group_rank.data() + std::size_t{g} * n;
    for (std::uint32_t p = 0; p < n; ++p) grank[p] = rank[p] == rank_forced ? rank_forced : UINT32_MAX;
    if (fill == 0) continue;
    std::uint32_t* order = scratch.order.data();  // one group at a time
    std::uint32_t c = 0;
    for (std::uint32_t p = 0; p < n; ++p) {
      if (rank[p] != rank_forced) order[c++] = p;
    }
    top_first(order, fill, candidates, in.bound.data() + std::size_t{g} * stride);
    for (std::uint32_t r = 0; r < fill; ++r) {
      const std::uint32_t p = order[r];
      grank[p] = r;
      heads[p] |= 1u << g;
      rank[p] = std::min(rank[p], r);
    }
  }
  std::uint32_t count = 0;
  for (std::uint32_t p = 0; p < n; ++p) count += heads[p] != 0 ? 1u : 0u;
  return count;
}

}  // namespace activekv::runtime
