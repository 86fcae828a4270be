// page_scores.cpp — see page_scores.hpp.
#include "runtime/page_scores.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <immintrin.h>

#include "activekv/assert.hpp"

namespace activekv::runtime {

PageMoments::PageMoments(std::uint32_t slots, std::uint32_t layers, std::uint32_t pages_max, std::uint32_t kv_heads,
                         std::uint32_t head_dim)
    : slots_(slots),
      layers_(layers),
      pages_max_(pages_max),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      data_(std::size_t{slots} * layers * pages_max * kv_heads * 2u * head_dim, 0.0f) {}

std::size_t PageMoments::offset(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept {
  AK_ASSERT(slot < slots_ && layer < layers_ && logical < pages_max_, "page moments: page out of range");
  return ((std::size_t{slot} * layers_ + layer) * pages_max_ + logical) * page_elements();
}

const float* PageMoments::page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept {
  return data_.data() + offset(slot, layer, logical);
}

void PageMoments::clear(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept {
  std::fill_n(data_.data() + offset(slot, layer, logical), page_elements(), 0.0f);
}

void PageMoments::add(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const float* key) noexcept {
  float* m = data_.data() + offset(slot, layer, logical);
  for (std::uint32_t h = 0; h < kv_heads_; ++h) {
    const float* k = key + std::size_t{h} * head_dim_;
    float* sum = m + std::size_t{h} * 2u * head_dim_;
    float* square = sum + head_dim_;
    for (std::uint32_t d = 0; d < head_dim_; ++d) {
      sum[d] += k[d];
      square[d] += k[d] * k[d];
    }
  }
}

void page_mass_from_scores(const float* scores, std::uint32_t heads, std::uint32_t tokens, std::uint32_t page_tokens,
                           float* out) noexcept {
  const std::uint32_t pages = (tokens + page_tokens - 1) / page_tokens;
  std::fill_n(out, pages, 0.0f);
  for (std::uint32_t h = 0; h < heads; ++h) {
    const float* s = scores + std::size_t{h} * tokens;
    const float top = *std::max_element(s, s + tokens);
    double total = 0.0;
    for (std::uint32_t t = 0; t < tokens; ++t) total += std::exp(static_cast<double>(s[t]) - top);
    for (std::uint32_t p = 0; p < pages; ++p) {
      double mass = 0.0;
      const std::uint32_t end = std::min(tokens, (p + 1) * page_tokens);
      for (std::uint32_t t = p * page_tokens; t < end; ++t) mass += std::exp(static_cast<double>(s[t]) - top);
      out[p] += static_cast<float>(mass / total);
    }
  }
}

namespace {

constexpr std::uint32_t lanes = 8;

inline float tree(const float* l) noexcept { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); }

inline std::uint32_t page_rows(std::uint32_t p, std::uint32_t tokens, std::uint32_t page_tokens) noexcept {
  const std::uint32_t first = p * page_tokens;
  return std::min(page_tokens, tokens > first ? tokens - first : 0u);
}

inline float log_mass(float c, float scale, float mean, float spread) noexcept {
  return std::log(c) + scale * mean + 0.5f * scale * scale * spread;
}

void log_mass_portable(const float* q, std::uint32_t heads, std::uint32_t dim, float scale, const float* moments,
                       std::size_t stride, std::uint32_t first, std::uint32_t count, std::uint32_t tokens,
                       std::uint32_t page_tokens, float* log, std::size_t log_stride) noexcept {
  for (std::uint32_t p = first; p < first + count; ++p) {
    const std::uint32_t rows = page_rows(p, tokens, page_tokens);
    if (rows == 0) {
      for (std::uint32_t h = 0; h < heads; ++h) log[h * log_stride + p] = -std::numeric_limits<float>::infinity();
      continue;
    }
    const float c = static_cast<float>(rows);
    const float inverse = 1.0f / c;
    const float* sum = moments + p * stride;
    const float* square = sum + dim;
    for (std::uint32_t h = 0; h < heads; ++h) {
      const float* qh = q + std::size_t{h} * dim;
      float mean[lanes] = {}, spread[lanes] = {};
      for (std::uint32_t d = 0; d < dim; ++d) {
        const float mu = sum[d] * inverse;
        const float var = std::max(0.0f, square[d] * inverse - mu * mu);
        mean[d % lanes] += qh[d] * mu;
        spread[d % lanes] += (qh[d] * qh[d]) * var;
      }
      log[h * log_stride + p] = log_mass(c, scale, tree(mean), tree(spread));
    }
  }
}

__attribute__((target("avx2"))) inline float tree_avx2(__m256 acc) noexcept {
  alignas(32) float l[lanes];
  _mm256_store_ps(l, acc);
  return tree(l);
}

// `Heads` query heads at once, μ and σ² computed once per 8 dimensions for all of them.
template <std::uint32_t Heads>
__attribute__((target("avx2"))) void log_mass_heads(const float* q, std::uint32_t dim, float scale,
                                                    const float* moments, std::size_t stride, std::uint32_t first,
                                                    std::uint32_t count, std::uint32_t tokens,
                                                    std::uint32_t page_tokens, float* log,
                                                    std::size_t log_stride) noexcept {
  const __m256 zero = _mm256_setzero_ps();
  for (std::uint32_t p = first; p < first + count; ++p) {
    const std::uint32_t rows = page_rows(p, tokens, page_tokens);
    if (rows == 0) {
      for (std::uint32_t h = 0; h < Heads; ++h) log[h * log_stride + p] = -std::numeric_limits<float>::infinity();
      continue;
    }
    const float c = static_cast<float>(rows);
    const __m256 inverse = _mm256_set1_ps(1.0f / c);
    const float* sum = moments + p * stride;
    const float* square = sum + dim;
    __m256 mean[Heads], spread[Heads];
    for (std::uint32_t h = 0; h < Heads; ++h) mean[h] = spread[h] = zero;
    for (std::uint32_t d = 0; d < dim; d += lanes) {
      const __m256 mu = _mm256_mul_ps(_mm256_loadu_ps(sum + d), inverse);
      // max(v, 0) gives 0 for a NaN v, as std::max(0, v) does.
      const __m256 var =
          _mm256_max_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(square + d), inverse), _mm256_mul_ps(mu, mu)), zero);
      for (std::uint32_t h = 0; h < Heads; ++h) {
        const __m256 qv = _mm256_loadu_ps(q + std::size_t{h} * dim + d);
        mean[h] = _mm256_add_ps(mean[h], _mm256_mul_ps(qv, mu));
        spread[h] = _mm256_add_ps(spread[h], _mm256_mul_ps(_mm256_mul_ps(qv, qv), var));
      }
    }
    for (std::uint32_t h = 0; h < Heads; ++h) {
      log[h * log_stride + p] = log_mass(c, scale, tree_avx2(mean[h]), tree_avx2(spread[h]));
    }
  }
}

const bool has_avx2 = __builtin_cpu_supports("avx2");

}  // namespace

void moment_log_mass(const float* q, std::uint32_t heads, std::uint32_t dim, float scale, const float* moments,
                     std::size_t stride, std::uint32_t first, std::uint32_t count, std::uint32_t tokens,
                     std::uint32_t page_tokens, float* log, std::size_t log_stride, MomentIsa isa) noexcept {
  if (isa != MomentIsa::best || !has_avx2 || dim % lanes != 0) {
    log_mass_portable(q, heads, dim, scale, moments, stride, first, count, tokens, page_tokens, log, log_stride);
    return;
  }
  // Blocks of up to 4 heads (each head's value is its own: the blocks change no bit).
  for (std::uint32_t h = 0; h < heads; h += 4) {
    const float* qh = q + std::size_t{h} * dim;
    float* lh = log + h * log_stride;
    switch (std::min(4u, heads - h)) {
      case 1: log_mass_heads<1>(qh, dim, scale, moments, stride, first, count, tokens, page_tokens, lh, log_stride); break;
      case 2: log_mass_heads<2>(qh, dim, scale, moments, stride, first, count, tokens, page_tokens, lh, log_stride); break;
      case 3: log_mass_heads<3>(qh, dim, scale, moments, stride, first, count, tokens, page_tokens, lh, log_stride); break;
      default: log_mass_heads<4>(qh, dim, scale, moments, stride, first, count, tokens, page_tokens, lh, log_stride); break;
    }
  }
}

void moment_mass_from_log(float* log, std::uint32_t heads, std::size_t log_stride, std::uint32_t pages,
                          float* out) noexcept {
  std::fill_n(out, pages, 0.0f);
  for (std::uint32_t h = 0; h < heads; ++h) {
    float* e = log + h * log_stride;
    const float top = *std::max_element(e, e + pages);
    double total = 0.0;
    for (std::uint32_t p = 0; p < pages; ++p) {
      e[p] = std::exp(e[p] - top);  // one exp per page and head, kept for the share below
      total += e[p];
    }
    for (std::uint32_t p = 0; p < pages; ++p) out[p] += static_cast<float>(e[p] / total);
  }
}

void moment_page_scores(const float* q, std::uint32_t heads, std::uint32_t dim, float scale, const float* moments,
                        std::size_t stride, std::uint32_t pages, std::uint32_t tokens, std::uint32_t page_tokens,
                        float* scratch, float* out) noexcept {
  moment_log_mass(q, heads, dim, scale, moments, stride, 0, pages, tokens, page_tokens, scratch, pages);
  moment_mass_from_log(scratch, heads, pages, pages, out);
}

void mix_bound_mass(const float* bound, const float* moments, std::uint32_t heads, float scale, std::uint32_t pages,
                    float* out, float w) noexcept {
  const float top = *std::max_element(bound, bound + pages);
  double total = 0.0;
  for (std::uint32_t p = 0; p < pages; ++p) {
    const float b = std::exp(scale * (bound[p] - top));  // read before out[p] (possibly bound[p]) is written
    out[p] = b;
    total += b;
  }
  for (std::uint32_t p = 0; p < pages; ++p) {
    out[p] = static_cast<float>(w * static_cast<double>(moments[p]) + (1.0 - w) * (heads * (out[p] / total)));
  }
}

float selected_mass_share(const float* mass, const std::uint32_t* keep, std::uint32_t bit, std::uint32_t pages) noexcept {
  double total = 0.0, selected = 0.0;
  for (std::uint32_t p = 0; p < pages; ++p) {
    const double m = mass[p] > 0.0f ? static_cast<double>(mass[p]) : 0.0;  // NaN and negatives count 0
    total += m;
    if ((keep[p] & bit) != 0) selected += m;
  }
  if (!(total > 0.0) || !std::isfinite(total)) return 1.0f;
  return static_cast<float>(std::clamp(selected / total, 0.0, 1.0));
}

}  // namespace activekv::runtime
