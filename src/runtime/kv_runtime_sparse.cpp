// kv_runtime_sparse.cpp — sparse attention in the runtime: summaries as rows land, the choice of
// pages per decode entry and layer, the adaptive budgets, the statistics (docs/SPARSE.md; the
// class: kv_runtime_impl.hpp; the summaries, the bound and the choice: sparse_selection.hpp).
//
// Invariants: created exact, none of this exists and a step runs exactly as before; created
// sparse, a page's summary holds exactly the keys the kernel reads from it (rebuilt from the
// authoritative host rows whenever the table is not known to be current for the context), and a
// step whose every entry reads all its pages hands the schedule no selection at all, so its
// arithmetic is exact mode's, bit for bit. Nothing here allocates after create().
#include "runtime/kv_runtime_impl.hpp"

#include <bit>

namespace activekv {

const char* sparse_mode_name(SparseMode mode) noexcept {
  switch (mode) {
    case SparseMode::exact: return "exact";
    case SparseMode::pages: return "pages";
    case SparseMode::fraction: return "fraction";
    case SparseMode::adaptive: return "adaptive";
  }
  return "?";
}

}  // namespace activekv

namespace activekv::runtime_impl {

namespace {
// The adaptive rule (docs/SPARSE.md "The adaptive rule"): grow fast, shrink slowly.
constexpr float grow_factor = 1.5f;     // one step below grow_below multiplies the budget by this
constexpr float shrink_factor = 0.97f;  // one comfortable step shrinks it by 3%
constexpr float slow_weight = 0.1f;     // the slow average's weight of a new step (~10 steps)
constexpr std::uint32_t initial_divisor = 8;  // a new context starts at 1/8 of its pages (or the floor)
// Layer budgets: the weight of a layer is its running missed mass, at least this (so a layer that
// captured everything keeps a share, and a new context starts with equal shares).
constexpr float layer_weight_least = 0.01f;
constexpr float layer_weight = 0.2f;  // the running average's weight of a new step (~5 steps)
}  // namespace

Status KvRuntimeImpl::set_sparse(const SparseSettings& sparse) {
  AK_ASSERT(!step_open_, "kv runtime: set_sparse() during a step");
  if (sparse.enabled() && summaries_ == nullptr) {
    return make_error(ErrorCode::invalid_argument, "--sparse-pages",
                      "this runtime was created exact and keeps no page summaries: create it with sparse enabled");
  }
  if (sparse.enabled()) {
    if (Status st = prepare_scores(sparse); !st) return st;
  }
  settings_.sparse = sparse;
  std::fill(budget_pages_.begin(), budget_pages_.end(), 0.0f);
  std::fill(captured_slow_.begin(), captured_slow_.end(), 1.0f);
  std::fill(layer_captured_.begin(), layer_captured_.end(), 1.0f);
  std::fill(heavy_.begin(), heavy_.end(), 0.0f);
  return Status::success();
}

// The key of an encoded row joins its page: as stored when the summary keeps that format
// (exact), else decoded as the kernel widens it and rounded outward.
void KvRuntimeImpl::add_key(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const std::byte* row) noexcept {
  const Geometry& g = plan_.geometry;
  if (runtime::summary_stores_dtype(summaries_->shape().format, g.dtype)) {
    summaries_->add_stored(slot, layer, logical, row);
    add_moments(slot, layer, logical, row, false);
    return;
  }
  runtime::decode_elements(g.dtype, row, std::size_t{g.kv_heads} * g.head_dim, key_row_.data());
  summaries_->add(slot, layer, logical, key_row_.data());
  add_moments(slot, layer, logical, row, true);
}

void KvRuntimeImpl::summarize_rows(std::uint32_t layer) {
  if (summaries_ == nullptr) return;
  const Geometry& g = plan_.geometry;
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint64_t row_bytes = g.row_bytes();
  const std::span<const std::byte> host = backend_.host_pool();
  for (std::uint32_t e = 0; e < entries(); ++e) {
    const LayerPlan& lp = layer_plan(layer, e);
    const ContextId context = scheduled_[e].context;
    const std::uint32_t slot = context.slot;
    // Stale (another context held the slot, an adopted or restored prefix, a failed step):
    // rebuild the layer's pages from the host rows, which are authoritative below length_before.
    const bool rebuilt = summarized_generation_[slot] != context.generation + 1 || summarized_tokens_[slot] != lp.length_before;
    if (rebuilt) {
      for (std::uint32_t t = 0; t < lp.length_before; ++t) {
        if (t % P == 0) clear_page(slot, layer, t / P);
        add_key(slot, layer, t / P, host.data() + plan_.host.row_offset(slot, layer, t));
      }
    }
    for (std::uint32_t i = 0; i < query_count_[e]; ++i) {
      const std::uint32_t t = lp.length_before + i;
      if (t % P == 0) clear_page(slot, layer, t / P);
      add_key(slot, layer, t / P, rows_.data() + (query_first_[e] + i) * row_bytes);
    }
    // The arena's copy: the pages this step changed in this layer, one contiguous range (from
    // page 0 when the layer was rebuilt), waited with the layer's row uploads.
    if (query_count_[e] == 0) continue;
    const std::uint32_t first = rebuilt ? 0 : lp.length_before / P, last = (lp.length_tokens - 1) / P;
    upload_summaries(layer, summaries_->page_offset(slot, layer, first),
                     std::uint64_t{last - first + 1} * summaries_->shape().page_bytes());
  }
}

// One range of the host table into the same range of the arena's summaries part (h2d, waited
// with the layer's row uploads: the host bytes stay untouched until then).
void KvRuntimeImpl::upload_summaries(std::uint32_t layer, std::uint64_t offset, std::uint64_t bytes) {
  if (fault_.what != nullptr) return;
  AK_ASSERT(summary_upload_count_ < summary_uploads_.size(), "kv runtime: more summary uploads than reserved");
  Result<Fence> up = backend_.upload(plan_.arena.summaries.offset_bytes + offset, summaries_->bytes().subspan(offset, bytes));
  if (!up.ok()) {
    note_refusal("a page-summary upload was refused by the backend", up.error(), layer);
    return;
  }
  summary_uploads_[summary_upload_count_++] = up.value();
  sparse_stats_.summary_upload_bytes += bytes;
}

std::uint32_t KvRuntimeImpl::sparse_budget(std::uint32_t slot, std::uint32_t layer, std::uint32_t pages) noexcept {
  const SparseSettings& s = settings_.sparse;
  const std::uint32_t least = 1u + std::max(1u, s.recent_pages);  // the sink and the newest pages
  // Layer budgets: the layer's share of budget × layers, by its running missed mass.
  const auto spread = [&](std::uint32_t budget) -> std::uint32_t {
    if (!s.layer_budget) return budget;
    const std::uint32_t layers = plan_.geometry.dense_layers;
    const float* captured = layer_captured_.data() + std::size_t{slot} * layers;
    float total = 0.0f;
    for (std::uint32_t l = 0; l < layers; ++l) total += std::max(layer_weight_least, 1.0f - captured[l]);
    const float share = std::max(layer_weight_least, 1.0f - captured[layer]) / total;
    const auto b = static_cast<std::uint32_t>(std::lround(share * static_cast<float>(budget) * static_cast<float>(layers)));
    return std::clamp(b, least, std::max(least, pages));
  };
  switch (s.mode) {
    case SparseMode::exact: return pages;
    case SparseMode::pages: return spread(std::max(least, s.pages));
    case SparseMode::fraction:
      return spread(std::max(least, static_cast<std::uint32_t>(std::ceil(static_cast<double>(s.fraction) * pages))));
    case SparseMode::adaptive: {
      const float floor = static_cast<float>(std::max(least, s.floor_pages));
      float& b = budget_pages_[slot];
      if (b == 0.0f) b = std::max(floor, std::ceil(static_cast<float>(pages) / initial_divisor));
      b = std::clamp(b, floor, std::max(floor, static_cast<float>(pages)));
      return static_cast<std::uint32_t>(std::ceil(b));
    }
  }
  return pages;
}

void KvRuntimeImpl::set_parallel(const ParallelChunks& parallel) {
  parallel_ = parallel.run != nullptr && parallel.threads > 1 ? parallel : ParallelChunks{};
  attention_borrows_ = backend_.set_parallel(parallel_);
}

namespace {
// Chunks per borrowed thread: a thread the machine descheduled delays only the chunk it holds.
constexpr std::uint32_t chunks_per_thread = 4;

struct BoundJob {
  runtime::SummaryFormat format;
  const float* positive;
  const float* negative;
  std::uint32_t kv_heads, group, head_dim, pages, chunks;
  const std::uint16_t* summaries;  // page 0 of the layer
  std::size_t page_stride;         // elements from one page's summary to the next
  float* out;                      // [kv_heads][out_stride]
  std::size_t out_stride;
  // The moments' log-mass per query head, when the score or the layer signal needs it (else
  // moments is null): e_h(p) into log[h × log_stride + p] (moment_log_mass).
  const float* q = nullptr;        // the entry's query, [q_heads][head_dim]
  const float* moments = nullptr;  // page 0 of the layer's moments
  std::size_t moment_stride = 0;
  std::uint32_t tokens = 0, page_tokens = 0;
  float scale = 0.0f;
  float* log = nullptr;
  std::size_t log_stride = 0;
};

// Pages [pages × c / chunks, pages × (c + 1) / chunks) of every KV head: page_bounds computes
// each page on its own, so any cut gives the same bits.
void bound_chunk(void* context, std::uint32_t chunk) noexcept {
  const BoundJob& j = *static_cast<const BoundJob*>(context);
  const auto first = static_cast<std::uint32_t>(std::uint64_t{j.pages} * chunk / j.chunks);
  const auto end = static_cast<std::uint32_t>(std::uint64_t{j.pages} * (chunk + 1) / j.chunks);
  if (first >= end) return;
  for (std::uint32_t kh = 0; kh < j.kv_heads; ++kh) {
    const std::size_t q_at = std::size_t{kh} * j.group * j.head_dim;
    runtime::page_bounds(j.format, j.positive + q_at, j.negative + q_at, j.group,
                         j.summaries + first * j.page_stride + std::size_t{kh} * 2u * j.head_dim, j.page_stride,
                         end - first, j.head_dim, j.out + kh * j.out_stride + first);
    if (j.moments != nullptr) {
      runtime::moment_log_mass(j.q + q_at, j.group, j.head_dim, j.scale,
                               j.moments + std::size_t{kh} * 2u * j.head_dim, j.moment_stride, first, end - first,
                               j.tokens, j.page_tokens, j.log + std::size_t{kh} * j.group * j.log_stride,
                               j.log_stride);
    }
  }
}
}  // namespace

void KvRuntimeImpl::sparse_bounds(std::uint32_t layer, std::uint32_t e, const float* qe, std::uint32_t n,
                                  float* out, std::size_t out_stride) noexcept {
  const Geometry& g = plan_.geometry;
  const runtime::SummaryShape& shape = summaries_->shape();
  const std::uint32_t slot = scheduled_[e].context.slot;
  const bool borrow = parallel_.run != nullptr && n >= parallel_.least;
  BoundJob job{shape.format, q_positive_.data(), q_negative_.data(), g.kv_heads, settings_.q_heads / g.kv_heads,
               g.head_dim, n, borrow ? parallel_.threads * chunks_per_thread : 1u, summaries_->page(slot, layer, 0),
               shape.page_stride(), out, out_stride};
  if (moments_ != nullptr && moments_wanted(settings_.sparse)) {
    AK_ASSERT(score_scratch_.size() >= std::size_t{settings_.q_heads} * sizes_.pages_per_layer_max,
              "sparse bounds: prepare_scores sizes the moments' log-mass for every query head");
    job.q = qe;
    job.moments = moments_->page(slot, layer, 0);
    job.moment_stride = moments_->page_elements();
    job.tokens = layer_plan(layer, e).length_tokens;
    job.page_tokens = plan_.arena.page_tokens;
    job.scale = shape_.scale;
    job.log = score_scratch_.data();
    job.log_stride = sizes_.pages_per_layer_max;
  }
  if (!borrow) {
    bound_chunk(&job, 0);
    return;
  }
  parallel_.run(parallel_.pool, &bound_chunk, &job, job.chunks);
}

bool KvRuntimeImpl::select_sparse(std::uint32_t layer, const float* q) noexcept {
  if (summaries_ == nullptr || !settings_.sparse.enabled()) return false;
  ScopedTimer timer(sparse_stats_.select_ns);
  ThreadCpuTimer cpu_timer(sparse_stats_.select_cpu_ns);
  const Geometry& g = plan_.geometry;
  const SparseSettings& s = settings_.sparse;
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint32_t max = sizes_.pages_per_layer_max;
  const bool heavy = s.mode == SparseMode::adaptive || s.heavy_hitters;
  per_group_ = s.per_group && !pick_group_rank_.empty();
  const std::uint32_t kv = g.kv_heads;
  bool any = false;
  for (std::uint32_t e = 0; e < entries(); ++e) {
    const LayerPlan& lp = layer_plan(layer, e);
    const std::uint32_t slot = scheduled_[e].context.slot;
    const std::uint32_t n = (lp.length_tokens + P - 1) / P;
    std::uint32_t* keep = keep_.data() + std::size_t{e} * max;
    const std::size_t sl = std::size_t{slot} * g.dense_layers + layer;
    std::uint32_t* pick_rank = pick_rank_.data() + sl * max;
    float* pick_bound = pick_bound_.data() + sl * max;
    float* scores = heavy_.data() + sl * max;
    fill_[e] = 0;
    unselected_[e] = 0;
    moment_captured_[e] = 1.0f;
    if (query_count_[e] != 1) {  // prefill stays exact
      std::fill_n(keep, n, all_heads_);
      continue;
    }
    const std::uint32_t budget = sparse_budget(slot, layer, n);
    pick_budget_[sl] = std::min(budget, n);
    ++sparse_stats_.selections;
    ++sparse_stats_.selections_last;
    sparse_stats_.pages_context += n;
    sparse_stats_.pages_context_last += n;
    pick_pages_[sl] = n;
    pick_step_[slot] = planner_.step() + 1;
    pick_per_group_[slot] = per_group_ ? 1 : 0;
    // Selective staging: the next step's prediction for this layer, and how each read page arrives.
    predict_generation_[slot] = scheduled_[e].context.generation + 1;
    std::uint8_t* last_read = last_read_.data() + sl * max;
    std::fill_n(pick_staging_.data() + sl * max, n, static_cast<std::uint8_t>(PickStaging::resident));
    if (heavy) {
      for (std::uint32_t p = 0; p < n; ++p) scores[p] *= s.heavy_decay;
    }
    if (budget >= n) {
      std::fill_n(keep, n, all_heads_);
      std::fill_n(last_read, n, std::uint8_t{1});
      std::fill_n(pick_rank, n, runtime::rank_forced);
      std::fill_n(pick_bound, n, 0.0f);
      if (per_group_) {
        std::fill_n(pick_group_rank_.data() + sl * kv * max, std::size_t{kv} * max, runtime::rank_forced);
        std::fill_n(pick_group_bound_.data() + sl * kv * max, std::size_t{kv} * max, 0.0f);
      }
      head_pages_read_ += std::uint64_t{n} * kv;
      const std::uint64_t pages_now = head_pages_read_ / kv;
      sparse_stats_.pages_read_last += pages_now - sparse_stats_.pages_read;
      sparse_stats_.pages_read = pages_now;
      continue;
    }
    // Each group's bound per page: the maximum over its query heads.
    const float* qe = q + std::size_t{query_first_[e]} * settings_.q_heads * g.head_dim;
    for (std::uint32_t h = 0; h < settings_.q_heads; ++h) {
      runtime::split_query(qe + std::size_t{h} * g.head_dim, g.head_dim, q_positive_.data() + std::size_t{h} * g.head_dim,
                           q_negative_.data() + std::size_t{h} * g.head_dim);
    }
    // Per group, the bounds go straight where explain reads them ([group][max]); else [group][n].
    float* bound_out = per_group_ ? pick_group_bound_.data() + sl * kv * max : bounds_.data();
    const std::size_t bound_stride = per_group_ ? max : n;
    sparse_bounds(layer, e, qe, n, bound_out, bound_stride);  // and the moments' log-mass, when asked
    score_pages(layer, e, qe, n, bound_out, bound_stride);  // another score, when the setting asks
    // Heavy hitters: pages whose decayed mass share stays high, at most half the budget.
    std::uint32_t heavy_count = 0;
    if (heavy) {
      const float threshold = s.heavy_share / std::max(1e-6f, 1.0f - s.heavy_decay);
      const std::uint32_t recent = std::max(1u, s.recent_pages);
      for (std::uint32_t p = 0; p < n; ++p) {
        heavy_flags_[p] = 0;
        if (p != 0 && p + recent < n && scores[p] >= threshold) selected_[heavy_count++] = p;
      }
      const std::uint32_t cap = budget / 2;
      if (heavy_count > cap) {
        std::partial_sort(selected_.data(), selected_.data() + cap, selected_.data() + heavy_count,
                          [scores](std::uint32_t a, std::uint32_t b) {
                            return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
                          });
        heavy_count = cap;
      }
      for (std::uint32_t i = 0; i < heavy_count; ++i) heavy_flags_[selected_[i]] = 1;
    }
    runtime::SelectionInput in;
    in.pages = n;
    in.groups = g.kv_heads;
    in.budget = budget;
    in.recent = std::max(1u, s.recent_pages);
    in.bound = {bound_out, (std::size_t{kv} - 1) * bound_stride + n};
    in.bound_stride = bound_stride;
    if (heavy) in.heavy = {heavy_flags_.data(), n};
    std::uint32_t count = 0;
    std::uint64_t head_pages = 0;  // (page, KV head) pairs read
    if (per_group_ && s.per_head && !head_scores_.empty()) {
      // Each group the union of its query heads' own rankings, round-robin within the budget.
      head_scores(layer, e, qe, n);
      const std::uint32_t group = settings_.q_heads / kv;
      std::fill_n(keep, n, 0u);
      for (std::uint32_t kh = 0; kh < kv; ++kh) {
        runtime::SelectionInput heads = in;
        heads.groups = group;
        heads.bound = {head_scores_.data() + std::size_t{kh} * group * max, (std::size_t{group} - 1) * max + n};
        heads.bound_stride = max;
        const std::uint32_t taken = runtime::select_pages(heads, *selection_, {selected_.data(), n});
        for (std::uint32_t i = 0; i < taken; ++i) keep[selected_[i]] |= 1u << kh;
        std::copy_n(selection_->rank.data(), n, selection_->group_rank.data() + std::size_t{kh} * n);
      }
      for (std::uint32_t p = 0; p < n; ++p) {
        head_pages += static_cast<std::uint64_t>(std::popcount(keep[p]));
        count += keep[p] != 0 ? 1u : 0u;
      }
      std::uint32_t* group_rank = pick_group_rank_.data() + sl * kv * max;
      for (std::uint32_t kh = 0; kh < kv; ++kh) {
        std::copy_n(selection_->group_rank.data() + std::size_t{kh} * n, n, group_rank + std::size_t{kh} * max);
      }
    } else if (per_group_) {
      // Each group its own pages: the kernel reads, per page, only the heads whose bit is set.
      count = runtime::select_pages_per_group(in, *selection_, {keep, n});
      for (std::uint32_t p = 0; p < n; ++p) head_pages += static_cast<std::uint64_t>(std::popcount(keep[p]));
      std::uint32_t* group_rank = pick_group_rank_.data() + sl * kv * max;
      for (std::uint32_t kh = 0; kh < kv; ++kh) {
        std::copy_n(selection_->group_rank.data() + std::size_t{kh} * n, n, group_rank + std::size_t{kh} * max);
      }
    } else {
      count = runtime::select_pages(in, *selection_, {selected_.data(), n});
      std::fill_n(keep, n, 0u);
      for (std::uint32_t i = 0; i < count; ++i) keep[selected_[i]] = all_heads_;
      head_pages = std::uint64_t{count} * kv;
    }
    for (std::uint32_t p = 0; p < n; ++p) last_read[p] = keep[p] != 0 ? 1 : 0;
    if (moment_signal(s) && moments_ != nullptr) {
      moment_captured_[e] = moment_captured(keep, n, per_group_);
      sparse_stats_.moment_estimate_sum += moment_captured_[e];
      ++sparse_stats_.moment_estimate_count;
    }
    std::uint32_t ranked = 0;
    std::copy_n(selection_->rank.data(), n, pick_rank);
    if (!per_group_) {  // one list: explain gives a page's best bound over the groups
      for (std::uint32_t p = 0; p < n; ++p) {
        const std::uint32_t r = selection_->rank[p];
        float b = bounds_[p];
        for (std::uint32_t kh = 1; kh < g.kv_heads; ++kh) b = std::max(b, bounds_[std::size_t{kh} * n + p]);
        pick_bound[p] = b;
        ranked += (r != UINT32_MAX && r != runtime::rank_forced) ? 1u : 0u;
      }
    }
    // Per group the pages ranked by bound (the estimate's "lower half" is within a group's list).
    fill_[e] = ranked;
    if (per_group_) {
      std::uint32_t forced = 0;
      for (std::uint32_t p = 0; p < n; ++p) forced += selection_->rank[p] == runtime::rank_forced ? 1u : 0u;
      fill_[e] = budget > forced ? budget - forced : 0u;
    }
    // Unread: pages no group reads, counted per group (the mass estimate's unit is one group's page).
    unselected_[e] = static_cast<std::uint32_t>((std::uint64_t{n} * kv - head_pages) / kv);
    // pages_read counts whole rows: a group reads only its head's part of a page's rows.
    head_pages_read_ += head_pages;
    const std::uint64_t pages_now = head_pages_read_ / kv;
    sparse_stats_.pages_read_last += pages_now - sparse_stats_.pages_read;
    sparse_stats_.pages_read = pages_now;
    any = any || head_pages < std::uint64_t{n} * kv;
  }
  return any;
}

void KvRuntimeImpl::finish_sparse_step() noexcept {
  if (summaries_ == nullptr) return;
  const std::uint32_t layers = plan_.geometry.dense_layers;
  for (std::uint32_t e = 0; e < entries(); ++e) {
    const ContextId context = scheduled_[e].context;
    const std::uint32_t slot = context.slot;
    // The summaries are current for this context up to its new length (every layer wrote).
    if (layers_written_ == layers && fault_.what == nullptr) {
      summarized_generation_[slot] = context.generation + 1;
      summarized_tokens_[slot] = layer_plan(0, e).length_tokens;
    } else {
      summarized_generation_[slot] = 0;
    }
    entry_of_slot_[slot] = UINT32_MAX;
    float* step_captured = layer_captured_step_.data() + std::size_t{e} * layers;
    for (std::uint32_t l = 0; l < layers; ++l) {
      if (step_captured[l] >= 0.0f) {
        float& running = layer_captured_[std::size_t{slot} * layers + l];
        running = (1.0f - layer_weight) * running + layer_weight * step_captured[l];
      }
      step_captured[l] = -1.0f;
    }
    if (settings_.sparse.mode != SparseMode::adaptive || captured_layers_[e] == 0) continue;
    // The adaptive rule: fast growth below grow_below, slow shrink while the slow average of the
    // captured mass stays above shrink_above.
    const float captured = static_cast<float>(captured_sum_[e] / captured_layers_[e]);
    float& slow = captured_slow_[slot];
    slow = (1.0f - slow_weight) * slow + slow_weight * captured;
    float& b = budget_pages_[slot];
    if (captured < settings_.sparse.grow_below) {
      b *= grow_factor;
    } else if (slow > settings_.sparse.shrink_above && captured > settings_.sparse.shrink_above) {
      b *= shrink_factor;
    }
  }
  if (sparse_stats_.selections_last > 0) ++sparse_stats_.decode_steps;
  if (recall_step_count_ > 0) sparse_stats_.recall_last = recall_step_sum_ / static_cast<double>(recall_step_count_);
}

}  // namespace activekv::runtime_impl

namespace activekv::runtime_impl {

void KvRuntimeImpl::note_page_mass(std::span<const runtime::PageKey> keys, std::span<const float> mass) noexcept {
  const std::uint32_t max = sizes_.pages_per_layer_max;
  const std::uint32_t layers = plan_.geometry.dense_layers;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const runtime::PageKey& k = keys[i];
    const std::size_t at = (std::size_t{k.slot} * layers + k.layer) * max + k.logical;
    heavy_[at] += mass[i];
    const std::uint32_t e = entry_of_slot_[k.slot];
    const std::uint32_t r = pick_rank_[at];
    // The lower half of the pages chosen by rank: the marginal pages, whose mass stands for
    // what the pages left out would have carried.
    if (e != UINT32_MAX && r != UINT32_MAX && r != runtime::rank_forced && r >= fill_[e] / 2) {
      tail_mass_[e] += mass[i];
      ++tail_count_[e];
    }
  }
}

void KvRuntimeImpl::note_captured_mass(std::uint32_t layer, bool measured, bool estimated) noexcept {
  const std::uint32_t heads = settings_.q_heads;
  const std::size_t stride = 2u + plan_.geometry.head_dim;
  for (std::uint32_t e = 0; e < entries(); ++e) {
    if (query_count_[e] != 1) continue;
    // Layer budgets by the moments: the layer's share follows their estimate (every layer that
    // selected; 1 when it read every page), whatever the other estimate or the measure says.
    const bool by_moments = moment_signal(settings_.sparse);
    if (by_moments) layer_captured_step_[std::size_t{e} * plan_.geometry.dense_layers + layer] = moment_captured_[e];
    double captured = 1.0;
    bool known = unselected_[e] == 0;
    if (!known && measured) {
      // mass = s · exp(m) per (query, head); recall = mass(selected) / mass(all).
      double sum = 0.0;
      for (std::uint32_t h = 0; h < heads; ++h) {
        const float* sel = state_.data() + (std::size_t{query_first_[e]} * heads + h) * stride;
        const float* all = full_state_.data() + (std::size_t{query_first_[e]} * heads + h) * stride;
        sum += static_cast<double>(sel[1]) * std::exp(static_cast<double>(sel[0]) - all[0]) / all[1];
      }
      captured = sum / heads;
      known = true;
    } else if (!known && estimated && tail_count_[e] > 0) {
      const double tail = static_cast<double>(tail_mass_[e]) / tail_count_[e];
      captured = 1.0 / (1.0 + unselected_[e] * tail);
      known = true;
    }
    if (!known) continue;
    // The layers' running averages move at end_step, so every layer of a step sees the same shares.
    if (!by_moments) layer_captured_step_[std::size_t{e} * plan_.geometry.dense_layers + layer] = static_cast<float>(captured);
    captured_sum_[e] += captured;
    ++captured_layers_[e];
    sparse_stats_.captured_estimate_sum += captured;
    if (settings_.sparse.measure) {
      sparse_stats_.recall_sum += captured;
      ++sparse_stats_.recall_count;
      sparse_stats_.recall_min = std::min(sparse_stats_.recall_min, captured);
      if (layer < SparseStats::recall_layers_max) {
        sparse_stats_.recall_layer_sum[layer] += captured;
        ++sparse_stats_.recall_layer_count[layer];
      }
      recall_step_sum_ += captured;
      ++recall_step_count_;
    }
  }
}

}  // namespace activekv::runtime_impl

namespace activekv::runtime_impl {

void KvRuntimeImpl::explain_sparse(ContextId context, Explanation& e) const {
  if (summaries_ == nullptr || pick_step_[context.slot] == 0 ||
      summarized_generation_[context.slot] != context.generation + 1) {
    return;
  }
  const std::uint32_t max = sizes_.pages_per_layer_max;
  const std::uint32_t layers = plan_.geometry.dense_layers;
  e.sparse_step = pick_step_[context.slot] - 1;
  const std::uint32_t* stage = stage_last_.data() + std::size_t{context.slot} * stage_columns;
  e.sparse_stage_selected = stage[0];
  e.sparse_stage_predicted = stage[1];
  e.sparse_stage_missed = stage[2];
  e.sparse_stage_unselected = stage[3];
  e.sparse_stage_skipped = stage[4];
  e.sparse_score = sparse_score_name(settings_.sparse.score);
  if (settings_.sparse.layer_budget && settings_.sparse.mode != SparseMode::adaptive) {
    e.sparse_layer_signal = layer_signal_name(settings_.sparse.layer_signal);
  }
  e.sparse_layer_budget.assign(pick_budget_.begin() + std::ptrdiff_t(std::size_t{context.slot} * layers),
                               pick_budget_.begin() + std::ptrdiff_t(std::size_t{context.slot} * layers + layers));
  const std::uint32_t kv = plan_.geometry.kv_heads;
  for (std::uint32_t l = 0; l < layers; ++l) {
    const std::size_t sl = std::size_t{context.slot} * layers + l;
    const std::uint32_t n = pick_pages_[sl];
    e.sparse_pages_held = std::max(e.sparse_pages_held, n);
    if (pick_per_group_[context.slot] != 0) {  // each group's own pages, group by group
      for (std::uint32_t kh = 0; kh < kv; ++kh) {
        const std::size_t at = (sl * kv + kh) * max;
        for (std::uint32_t p = 0; p < n; ++p) {
          const std::uint32_t r = pick_group_rank_[at + p];
          if (r == UINT32_MAX) continue;
          e.sparse_picks.push_back(SparsePick{l, p, pick_group_bound_[at + p], r == runtime::rank_forced ? UINT32_MAX : r,
                                              kh, static_cast<PickStaging>(pick_staging_[sl * max + p])});
        }
      }
      continue;
    }
    for (std::uint32_t p = 0; p < n; ++p) {
      const std::uint32_t r = pick_rank_[sl * max + p];
      if (r == UINT32_MAX) continue;
      e.sparse_picks.push_back(SparsePick{l, p, pick_bound_[sl * max + p], r == runtime::rank_forced ? UINT32_MAX : r,
                                          UINT32_MAX, static_cast<PickStaging>(pick_staging_[sl * max + p])});
    }
  }
}

}  // namespace activekv::runtime_impl

namespace activekv::runtime_impl {

std::uint32_t KvRuntimeImpl::sparse_rank(ContextId context, std::uint32_t layer, std::uint32_t group,
                                         std::uint32_t logical) const {
  const std::uint32_t layers = plan_.geometry.dense_layers, kv = plan_.geometry.kv_heads;
  if (summaries_ == nullptr || context.slot >= pick_step_.size() || pick_step_[context.slot] == 0 ||
      pick_per_group_[context.slot] == 0 || layer >= layers || group >= kv) {
    return UINT32_MAX;
  }
  const std::uint32_t max = sizes_.pages_per_layer_max;
  const std::size_t sl = std::size_t{context.slot} * layers + layer;
  const std::uint32_t n = pick_pages_[sl];
  if (logical >= n) return UINT32_MAX;
  const float* score = pick_group_bound_.data() + (sl * kv + group) * max;
  std::uint32_t rank = 0;
  for (std::uint32_t p = 0; p < n; ++p) {
    rank += (score[p] > score[logical] || (score[p] == score[logical] && p < logical)) ? 1u : 0u;
  }
  return rank;
}

}  // namespace activekv::runtime_impl
