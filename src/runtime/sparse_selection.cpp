// sparse_selection.cpp — see sparse_selection.hpp.
#include "runtime/sparse_selection.hpp"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "activekv/assert.hpp"

namespace activekv::runtime {

PageSummaries::PageSummaries(const SummaryShape& shape) : shape_(shape) {
  data_.resize(shape.floats());
}

const float* PageSummaries::page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept {
  return const_cast<PageSummaries*>(this)->at(slot, layer, logical);
}

float* PageSummaries::at(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept {
  AK_ASSERT(slot < shape_.slots && layer < shape_.layers && logical < shape_.pages_max,
            "page summaries: page out of range");
  const std::size_t page_floats = std::size_t{shape_.kv_heads} * 2u * shape_.head_dim;
  return data_.data() + ((std::size_t{slot} * shape_.layers + layer) * shape_.pages_max + logical) * page_floats;
}

void PageSummaries::clear(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept {
  float* s = at(slot, layer, logical);
  const std::uint32_t d = shape_.head_dim;
  for (std::uint32_t h = 0; h < shape_.kv_heads; ++h, s += 2u * d) {
    std::fill_n(s, d, std::numeric_limits<float>::infinity());
    std::fill_n(s + d, d, -std::numeric_limits<float>::infinity());
  }
}

void PageSummaries::add(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const float* key) noexcept {
  float* s = at(slot, layer, logical);
  const std::uint32_t d = shape_.head_dim;
  for (std::uint32_t h = 0; h < shape_.kv_heads; ++h, s += 2u * d, key += d) {
    for (std::uint32_t i = 0; i < d; ++i) {
      s[i] = std::min(s[i], key[i]);
      s[d + i] = std::max(s[d + i], key[i]);
    }
  }
}

namespace {
constexpr std::uint32_t lanes = 8;
}

// Every bound below is Σ_d (q⁺_d · max_d + q⁻_d · min_d), term by term in this order, added
// into lane d mod 8, the lanes summed in order: one sequence of IEEE operations whatever the
// clone (the AVX2 clone runs the same operations 8 at a time; no FMA, so no contraction).
float page_bound(const float* q, const float* summary_min, const float* summary_max, std::uint32_t dim) noexcept {
  float acc[lanes] = {};
  for (std::uint32_t i = 0; i < dim; ++i) {
    const float qp = std::max(q[i], 0.0f), qn = std::min(q[i], 0.0f);
    acc[i % lanes] += qp * summary_max[i] + qn * summary_min[i];
  }
  float sum = 0.0f;
  for (float a : acc) sum += a;
  return sum;
}

void split_query(const float* q, std::uint32_t dim, float* positive, float* negative) noexcept {
  for (std::uint32_t i = 0; i < dim; ++i) {
    positive[i] = std::max(q[i], 0.0f);
    negative[i] = std::min(q[i], 0.0f);
  }
}

namespace {

float group_bound_portable(const float* positive, const float* negative, std::uint32_t heads, const float* summary_min,
                           const float* summary_max, std::uint32_t dim) noexcept {
  float best = -std::numeric_limits<float>::infinity();
  for (std::uint32_t h = 0; h < heads; ++h) {
    const float* qp = positive + std::size_t{h} * dim;
    const float* qn = negative + std::size_t{h} * dim;
    float acc[lanes] = {};
    for (std::uint32_t i = 0; i < dim; ++i) acc[i % lanes] += qp[i] * summary_max[i] + qn[i] * summary_min[i];
    float sum = 0.0f;
    for (float a : acc) sum += a;
    best = std::max(best, sum);
  }
  return best;
}

// The same operations, 8 lanes per instruction (no FMA: each product rounds, as above).
__attribute__((target("avx2"))) float group_bound_avx2(const float* positive, const float* negative,
                                                       std::uint32_t heads, const float* summary_min,
                                                       const float* summary_max, std::uint32_t dim) noexcept {
  if (dim % lanes != 0) return group_bound_portable(positive, negative, heads, summary_min, summary_max, dim);
  float best = -std::numeric_limits<float>::infinity();
  for (std::uint32_t h = 0; h < heads; ++h) {
    const float* qp = positive + std::size_t{h} * dim;
    const float* qn = negative + std::size_t{h} * dim;
    __m256 acc = _mm256_setzero_ps();
    for (std::uint32_t i = 0; i < dim; i += lanes) {
      const __m256 hi = _mm256_mul_ps(_mm256_loadu_ps(qp + i), _mm256_loadu_ps(summary_max + i));
      const __m256 lo = _mm256_mul_ps(_mm256_loadu_ps(qn + i), _mm256_loadu_ps(summary_min + i));
      acc = _mm256_add_ps(acc, _mm256_add_ps(hi, lo));
    }
    alignas(32) float lane[lanes];
    _mm256_store_ps(lane, acc);
    float sum = 0.0f;
    for (float a : lane) sum += a;
    best = std::max(best, sum);
  }
  return best;
}

using GroupBound = float (*)(const float*, const float*, std::uint32_t, const float*, const float*, std::uint32_t) noexcept;
const GroupBound chosen_group_bound = __builtin_cpu_supports("avx2") ? group_bound_avx2 : group_bound_portable;

}  // namespace

float group_bound(const float* positive, const float* negative, std::uint32_t heads, const float* summary_min,
                  const float* summary_max, std::uint32_t dim) noexcept {
  return chosen_group_bound(positive, negative, heads, summary_min, summary_max, dim);
}

float lane_dot(const float* q, const float* k, std::uint32_t dim) noexcept {
  float acc[lanes] = {};
  std::uint32_t i = 0;
  for (; i + lanes <= dim; i += lanes) {
    for (std::uint32_t j = 0; j < lanes; ++j) acc[j] += q[i + j] * k[i + j];
  }
  for (std::uint32_t j = 0; i < dim; ++i, ++j) acc[j] += q[i] * k[i];
  float sum = 0.0f;
  for (float a : acc) sum += a;
  return sum;
}

SelectionScratch::SelectionScratch(std::uint32_t groups_max, std::uint32_t pages_max)
    : order(std::size_t{groups_max} * pages_max),
      rank(pages_max),
      group_rank(std::size_t{groups_max} * pages_max) {}

std::uint32_t select_pages(const SelectionInput& in, SelectionScratch& scratch,
                           std::span<std::uint32_t> selected) noexcept {
  const std::uint32_t n = in.pages;
  AK_ASSERT(n <= scratch.rank.size() && n <= selected.size(), "sparse selection: more pages than reserved");
  AK_ASSERT(std::size_t{in.groups} * n <= scratch.order.size(), "sparse selection: more groups than reserved");
  AK_ASSERT(in.bound.size() >= std::size_t{in.groups} * n, "sparse selection: a bound per group and page");
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
      const float* bound = in.bound.data() + std::size_t{g} * n;
      std::partial_sort(order, order + fill, order + candidates, [bound](std::uint32_t a, std::uint32_t b) {
        return bound[a] > bound[b] || (bound[a] == bound[b] && a < b);
      });
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
  AK_ASSERT(in.bound.size() >= std::size_t{in.groups} * n, "sparse selection: a bound per group and page");
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
    const float* bound = in.bound.data() + std::size_t{g} * n;
    std::partial_sort(order, order + fill, order + candidates, [bound](std::uint32_t a, std::uint32_t b) {
      return bound[a] > bound[b] || (bound[a] == bound[b] && a < b);
    });
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
