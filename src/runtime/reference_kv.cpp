// reference_kv.cpp — contiguous history and the contract's paged attention, in plain loops.
#include "runtime/reference_kv.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "activekv/assert.hpp"
#include "runtime/element_codec.hpp"

namespace activekv::runtime {

ReferenceKv::ReferenceKv(const Geometry& geometry, std::uint32_t q_heads, std::uint32_t page_tokens)
    : geometry_(geometry), q_heads_(q_heads), page_tokens_(page_tokens) {
  AK_ASSERT(geometry.kv_heads > 0, "reference kv: kv_heads must be positive");
  AK_ASSERT(q_heads % geometry.kv_heads == 0, "reference kv: q_heads must be a multiple of kv_heads");
  AK_ASSERT(page_tokens > 0, "reference kv: page_tokens must be positive");
}

std::uint32_t ReferenceKv::open() {
  rows_.emplace_back(geometry_.dense_layers);
  return static_cast<std::uint32_t>(rows_.size() - 1);
}

std::uint32_t ReferenceKv::length(std::uint32_t context) const {
  AK_ASSERT(context < rows_.size(), "reference kv: unknown context");
  return static_cast<std::uint32_t>(rows_[context][0].size() / geometry_.row_bytes());
}

void ReferenceKv::append(std::uint32_t context, std::uint32_t layer, const float* k, const float* v,
                         std::uint32_t n) {
  AK_ASSERT(context < rows_.size(), "reference kv: unknown context");
  AK_ASSERT(layer < geometry_.dense_layers, "reference kv: layer out of range");
  const std::size_t head_elems = std::size_t{geometry_.kv_heads} * geometry_.head_dim;
  const std::size_t half_bytes = geometry_.half_row_bytes();
  auto& bytes = rows_[context][layer];
  const std::size_t start = bytes.size();
  bytes.resize(start + n * geometry_.row_bytes());
  for (std::uint32_t i = 0; i < n; ++i) {
    std::byte* row = bytes.data() + start + i * geometry_.row_bytes();
    encode_elements(geometry_.dtype, k + i * head_elems, head_elems, row);
    encode_elements(geometry_.dtype, v + i * head_elems, head_elems, row + half_bytes);
  }
}

std::span<const std::byte> ReferenceKv::encoded_row(std::uint32_t context, std::uint32_t layer,
                                                    std::uint32_t token) const {
  AK_ASSERT(context < rows_.size(), "reference kv: unknown context");
  AK_ASSERT(layer < geometry_.dense_layers, "reference kv: layer out of range");
  const auto& bytes = rows_[context][layer];
  AK_ASSERT((token + 1ull) * geometry_.row_bytes() <= bytes.size(), "reference kv: token not written");
  return {bytes.data() + token * geometry_.row_bytes(), geometry_.row_bytes()};
}

void ReferenceKv::decode_head(std::uint32_t context, std::uint32_t layer, std::uint32_t token,
                              std::uint32_t kv_head, bool value, float* out) const {
  const auto row = encoded_row(context, layer, token);
  const std::size_t element_bytes = dtype_bytes(geometry_.dtype);
  const std::size_t offset = (value ? geometry_.half_row_bytes() : 0) + kv_head * geometry_.head_dim * element_bytes;
  decode_elements(geometry_.dtype, row.data() + offset, geometry_.head_dim, out);
}

std::uint32_t ReferenceKv::first_seen(std::uint32_t layer, std::uint32_t position) const noexcept {
  const std::uint32_t window = geometry_.kinds.window_of(layer);
  return window != 0 && position + 1 > window ? position + 1 - window : 0;
}

void ReferenceKv::attend(std::uint32_t context, std::uint32_t layer, const float* q, std::uint32_t n,
                         std::uint32_t first_position, float* out, std::span<const std::uint32_t> pages_read) const {
  const std::uint32_t d = geometry_.head_dim;
  const std::uint32_t group = q_heads_ / geometry_.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  AK_ASSERT(first_position + n <= length(context), "reference kv: a query position has no key row");
  std::vector<float> key(d), value(d), acc(d), page_acc(d);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t visible = first_position + i + 1;  // keys 0 .. position
    const std::uint32_t seen_first = first_seen(layer, first_position + i);  // a window layer's first key
    for (std::uint32_t h = 0; h < q_heads_; ++h) {
      const float* qh = q + (std::size_t{i} * q_heads_ + h) * d;
      const std::uint32_t kv_head = h / group;
      float m = -std::numeric_limits<float>::infinity();
      float s = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::uint32_t page_start = seen_first / page_tokens_ * page_tokens_; page_start < visible;
           page_start += page_tokens_) {
        const std::uint32_t page_end = std::min(visible, page_start + page_tokens_);
        const std::uint32_t page = page_start / page_tokens_;
        if (!pages_read.empty() && (page >= pages_read.size() || ((pages_read[page] >> kv_head) & 1u) == 0)) continue;
        // The page's own partial, in ascending token order.
        float pm = -std::numeric_limits<float>::infinity();
        float ps = 0.0f;
        std::fill(page_acc.begin(), page_acc.end(), 0.0f);
        for (std::uint32_t t = std::max(page_start, seen_first); t < page_end; ++t) {
          decode_head(context, layer, t, kv_head, false, key.data());
          decode_head(context, layer, t, kv_head, true, value.data());
          float dot = 0.0f;
          for (std::uint32_t e = 0; e < d; ++e) dot += qh[e] * key[e];
          const float score = dot * scale;
          const float new_max = std::max(pm, score);
          const float correction = std::exp(pm - new_max);
          const float weight = std::exp(score - new_max);
          ps = ps * correction + weight;
          for (std::uint32_t e = 0; e < d; ++e) page_acc[e] = page_acc[e] * correction + weight * value[e];
          pm = new_max;
        }
        // Merge the page's partial into the running one, in ascending page order.
        const float new_max = std::max(m, pm);
        const float a = std::exp(m - new_max);
        const float b = std::exp(pm - new_max);
        s = s * a + ps * b;
        for (std::uint32_t e = 0; e < d; ++e) acc[e] = acc[e] * a + page_acc[e] * b;
        m = new_max;
      }
      float* oh = out + (std::size_t{i} * q_heads_ + h) * d;
      for (std::uint32_t e = 0; e < d; ++e) oh[e] = acc[e] / s;
    }
  }
}

void ReferenceKv::attend_naive(std::uint32_t context, std::uint32_t layer, const float* q, std::uint32_t n,
                               std::uint32_t first_position, float* out) const {
  const std::uint32_t d = geometry_.head_dim;
  const std::uint32_t group = q_heads_ / geometry_.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  AK_ASSERT(first_position + n <= length(context), "reference kv: a query position has no key row");
  std::vector<float> key(d), value(d);
  std::vector<double> scores, acc(d);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t visible = first_position + i + 1;
    const std::uint32_t seen_first = first_seen(layer, first_position + i);
    scores.assign(visible, 0.0);
    for (std::uint32_t h = 0; h < q_heads_; ++h) {
      const float* qh = q + (std::size_t{i} * q_heads_ + h) * d;
      const std::uint32_t kv_head = h / group;
      double max_score = -std::numeric_limits<double>::infinity();
      for (std::uint32_t t = seen_first; t < visible; ++t) {
        decode_head(context, layer, t, kv_head, false, key.data());
        double dot = 0.0;
        for (std::uint32_t e = 0; e < d; ++e) dot += double{qh[e]} * double{key[e]};
        scores[t] = dot * scale;
        max_score = std::max(max_score, scores[t]);
      }
      double sum = 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::uint32_t t = seen_first; t < visible; ++t) {
        const double weight = std::exp(scores[t] - max_score);
        sum += weight;
        decode_head(context, layer, t, kv_head, true, value.data());
        for (std::uint32_t e = 0; e < d; ++e) acc[e] += weight * double{value[e]};
      }
      float* oh = out + (std::size_t{i} * q_heads_ + h) * d;
      for (std::uint32_t e = 0; e < d; ++e) oh[e] = static_cast<float>(acc[e] / sum);
    }
  }
}

}  // namespace activekv::runtime
