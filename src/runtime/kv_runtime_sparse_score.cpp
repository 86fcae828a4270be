// kv_runtime_sparse_score.cpp — the runtime's page scores other than the bound (docs/SPARSE.md
// "Scores"; the arithmetic: page_scores.hpp): the key moments kept as rows land, and the
// per-group scores that replace the bound in the ranking when SparseSettings::score asks, the
// moments' per-page mass kept for the layer budgets' moments signal (moment_captured), and each
// query head's own scores for per-head rankings (head_scores).
//
// Invariants: with the default score (bound) none of this runs or is allocated, and the
// selection is exactly the bound's; the moments, when kept, hold exactly the keys of each page
// (cleared and rebuilt with the summaries); the storage is reserved when the setting is made
// (create or set_sparse), never during a step.
#include "runtime/kv_runtime_impl.hpp"

#include "runtime/element_codec.hpp"

namespace activekv::runtime_impl {

Status KvRuntimeImpl::prepare_scores(const SparseSettings& sparse) {
  const Geometry& g = plan_.geometry;
  const std::uint32_t pages = sizes_.pages_per_layer_max;
  try {
    const bool uses_moments = moments_wanted(sparse);
    if (uses_moments && moments_ == nullptr) {
      moments_ = std::make_unique<runtime::PageMoments>(budgets_.slots(), g.dense_layers, pages, g.kv_heads, g.head_dim);
      // No slot's moments are current: every context rebuilds its pages on its next write_kv.
      std::fill(summarized_generation_.begin(), summarized_generation_.end(), 0u);
    }
    if (uses_moments) {
      score_scratch_.resize(std::size_t{settings_.q_heads} * pages);
      moment_mass_.resize(std::size_t{g.kv_heads} * pages);
    }
    if (sparse.per_head) {
      head_scores_.resize(std::size_t{settings_.q_heads} * pages);
      head_mass_.resize(pages);
      if (uses_moments) score_scratch_.resize(std::max(score_scratch_.size(), std::size_t{pages}));
    }
    if (sparse.score == SparseScore::oracle) {
      oracle_scores_.resize(std::size_t{settings_.q_heads} * pages * plan_.arena.page_tokens);
    }
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::exhausted, "--sparse-score",
                      fmt::format("no memory for the '{}' page scores: use the bound", sparse_score_name(sparse.score)));
  }
  return Status::success();
}

float KvRuntimeImpl::moment_captured(const std::uint32_t* keep, std::uint32_t n, bool per_group) const noexcept {
  const std::uint32_t kv = plan_.geometry.kv_heads;
  double sum = 0.0;
  for (std::uint32_t kh = 0; kh < kv; ++kh) {
    const std::uint32_t bit = per_group ? (1u << kh) : ~0u;
    sum += runtime::selected_mass_share(moment_mass_.data() + std::size_t{kh} * sizes_.pages_per_layer_max, keep, bit, n);
  }
  return static_cast<float>(sum / kv);
}

void KvRuntimeImpl::clear_page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept {
  summaries_->clear(slot, layer, logical);
  if (moments_ != nullptr) moments_->clear(slot, layer, logical);
}

void KvRuntimeImpl::add_moments(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const std::byte* row,
                                bool decoded) noexcept {
  if (moments_ == nullptr) return;
  const Geometry& g = plan_.geometry;
  if (!decoded) runtime::decode_elements(g.dtype, row, std::size_t{g.kv_heads} * g.head_dim, key_row_.data());
  moments_->add(slot, layer, logical, key_row_.data());
}

namespace {
// A score that is not a number (keys that overflowed) ranks last: the ranking's order stays total.
void unnan(float* out, std::uint32_t n) noexcept {
  for (std::uint32_t p = 0; p < n; ++p) {
    if (std::isnan(out[p])) out[p] = -std::numeric_limits<float>::infinity();
  }
}
}  // namespace

void KvRuntimeImpl::score_pages(std::uint32_t layer, std::uint32_t e, const float* qe, std::uint32_t n, float* out,
                                std::size_t stride) noexcept {
  const SparseScore score = settings_.sparse.score;
  const bool signal = moment_signal(settings_.sparse);
  if (score == SparseScore::bound && !signal) return;
  const Geometry& g = plan_.geometry;
  const std::uint32_t group = settings_.q_heads / g.kv_heads;
  const std::uint32_t P = plan_.arena.page_tokens;
  const LayerPlan& lp = layer_plan(layer, e);
  const std::uint32_t slot = scheduled_[e].context.slot;
  const std::uint32_t tokens = lp.length_tokens;
  // The moments' mass per group into moment_mass_ ([kv_heads][pages_per_layer_max]): the score
  // (moments, mixed) and the layer signal (select_sparse reads it after the selection).
  if (score == SparseScore::moments || score == SparseScore::mixed || signal) {
    if (moments_ == nullptr) return;
    // sparse_bounds left each query head's log-mass in score_scratch_ (with the bounds, on the
    // same chunks); here only the softmax over the pages per head, summed per group.
    const std::size_t max = sizes_.pages_per_layer_max;
    for (std::uint32_t kh = 0; kh < g.kv_heads; ++kh) {
      float* mass = moment_mass_.data() + std::size_t{kh} * max;
      runtime::moment_mass_from_log(score_scratch_.data() + std::size_t{kh} * group * max, group, max, n, mass);
      float* o = out + std::size_t{kh} * stride;
      if (score == SparseScore::moments) std::copy_n(mass, n, o);
      // mixed: o holds the group's bound, and becomes the mean of the two mass distributions.
      if (score == SparseScore::mixed) runtime::mix_bound_mass(o, mass, group, shape_.scale, n, o, settings_.sparse.mix_moments);
      if (score == SparseScore::moments || score == SparseScore::mixed) unnan(o, n);
    }
    if (score != SparseScore::oracle) return;
  }
  // The oracle: every key of the layer (the host rows below length_before, this step's rows
  // after), each group's scaled q·k, then the true softmax mass per page.
  if (oracle_scores_.size() < std::size_t{settings_.q_heads} * tokens) return;
  const std::span<const std::byte> host = backend_.host_pool();
  const std::uint64_t row_bytes = g.row_bytes();
  for (std::uint32_t t = 0; t < tokens; ++t) {
    const std::byte* row = t < lp.length_before
                               ? host.data() + plan_.host.row_offset(slot, layer, t)
                               : rows_.data() + (query_first_[e] + (t - lp.length_before)) * row_bytes;
    runtime::decode_elements(g.dtype, row, std::size_t{g.kv_heads} * g.head_dim, key_row_.data());
    for (std::uint32_t h = 0; h < settings_.q_heads; ++h) {
      const float* qh = qe + std::size_t{h} * g.head_dim;
      const float* k = key_row_.data() + std::size_t{h / group} * g.head_dim;
      float dot = 0.0f;
      for (std::uint32_t d = 0; d < g.head_dim; ++d) dot += qh[d] * k[d];
      oracle_scores_[std::size_t{h} * tokens + t] = dot * shape_.scale;
    }
  }
  for (std::uint32_t kh = 0; kh < g.kv_heads; ++kh) {
    runtime::page_mass_from_scores(oracle_scores_.data() + std::size_t{kh} * group * tokens, group, tokens, P,
                                   out + std::size_t{kh} * stride);
    unnan(out + std::size_t{kh} * stride, n);
  }
}

// Each query head's own score (per_head), after score_pages ran for the entry (the oracle's
// scaled q·k of every head are then in oracle_scores_).
void KvRuntimeImpl::head_scores(std::uint32_t layer, std::uint32_t e, const float* qe, std::uint32_t n) noexcept {
  (void)e;
  const Geometry& g = plan_.geometry;
  const SparseScore score = settings_.sparse.score;
  const std::uint32_t group = settings_.q_heads / g.kv_heads;
  const std::uint32_t max = sizes_.pages_per_layer_max;
  const std::uint32_t P = plan_.arena.page_tokens;
  const LayerPlan& lp = layer_plan(layer, e);
  const std::uint32_t slot = scheduled_[e].context.slot;
  const runtime::SummaryShape& shape = summaries_->shape();
  for (std::uint32_t h = 0; h < settings_.q_heads; ++h) {
    const std::uint32_t kh = h / group;
    float* o = head_scores_.data() + std::size_t{h} * max;
    const std::size_t q_at = std::size_t{h} * g.head_dim;
    if (score == SparseScore::oracle) {
      if (oracle_scores_.size() < std::size_t{settings_.q_heads} * lp.length_tokens) continue;
      runtime::page_mass_from_scores(oracle_scores_.data() + std::size_t{h} * lp.length_tokens, 1, lp.length_tokens, P, o);
      unnan(o, n);
      continue;
    }
    runtime::page_bounds(shape.format, q_positive_.data() + q_at, q_negative_.data() + q_at, 1,
                         summaries_->page(slot, layer, 0) + std::size_t{kh} * 2u * g.head_dim, shape.page_stride(), n,
                         g.head_dim, o);
    if ((score == SparseScore::moments || score == SparseScore::mixed) && moments_ != nullptr) {
      runtime::moment_page_scores(qe + q_at, 1, g.head_dim, shape_.scale,
                                  moments_->page(slot, layer, 0) + std::size_t{kh} * 2u * g.head_dim,
                                  moments_->page_elements(), n, lp.length_tokens, P, score_scratch_.data(), head_mass_.data());
      if (score == SparseScore::moments) std::copy_n(head_mass_.data(), n, o);
      if (score == SparseScore::mixed) runtime::mix_bound_mass(o, head_mass_.data(), 1, shape_.scale, n, o, settings_.sparse.mix_moments);
    }
    unnan(o, n);
  }
}

}  // namespace activekv::runtime_impl
