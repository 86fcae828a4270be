// page_scores.cpp — see page_scores.hpp.
#include "runtime/page_scores.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

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

void moment_page_scores(const float* q, std::uint32_t heads, std::uint32_t dim, float scale, const float* moments,
                        std::size_t stride, std::uint32_t pages, std::uint32_t tokens, std::uint32_t page_tokens,
                        float* scratch, float* out) noexcept {
  for (std::uint32_t p = 0; p < pages; ++p) {
    const std::uint32_t first = p * page_tokens;
    const std::uint32_t rows = std::min(page_tokens, tokens > first ? tokens - first : 0u);
    const float* sum = moments + p * stride;
    const float* square = sum + dim;
    for (std::uint32_t h = 0; h < heads; ++h) {
      float& e = scratch[std::size_t{h} * pages + p];
      if (rows == 0) {
        e = -std::numeric_limits<float>::infinity();
        continue;
      }
      const float c = static_cast<float>(rows);
      const float* qh = q + std::size_t{h} * dim;
      float mean = 0.0f, spread = 0.0f;
      for (std::uint32_t d = 0; d < dim; ++d) {
        const float mu = sum[d] / c;
        const float var = std::max(0.0f, square[d] / c - mu * mu);
        mean += qh[d] * mu;
        spread += qh[d] * qh[d] * var;
      }
      e = std::log(c) + scale * mean + 0.5f * scale * scale * spread;
    }
  }
  std::fill_n(out, pages, 0.0f);
  for (std::uint32_t h = 0; h < heads; ++h) {
    const float* e = scratch + std::size_t{h} * pages;
    const float top = *std::max_element(e, e + pages);
    double total = 0.0;
    for (std::uint32_t p = 0; p < pages; ++p) total += std::exp(static_cast<double>(e[p]) - top);
    for (std::uint32_t p = 0; p < pages; ++p) out[p] += static_cast<float>(std::exp(static_cast<double>(e[p]) - top) / total);
  }
}

void mix_bound_mass(const float* bound, const float* moments, std::uint32_t heads, float scale, std::uint32_t pages,
                    float* out) noexcept {
  const float top = *std::max_element(bound, bound + pages);
  double total = 0.0;
  for (std::uint32_t p = 0; p < pages; ++p) total += std::exp(static_cast<double>(scale) * (bound[p] - top));
  for (std::uint32_t p = 0; p < pages; ++p) {
    const double b = std::exp(static_cast<double>(scale) * (bound[p] - top)) / total;
    out[p] = static_cast<float>(0.5 * (static_cast<double>(moments[p]) + heads * b));
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
