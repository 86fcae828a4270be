// sparse_selection.hpp — page summaries, the q·k upper bound, and the choice of pages (docs/SPARSE.md).
//
// Sparse attention reads, on a decode step, only some of a context's pages. Which ones is
// decided from a summary of each page's keys (Quest): per KV head and dimension, the minimum
// and maximum of the keys in the page. For a query q and any key k of the page,
//
//     q·k = Σ_d q_d k_d  ≤  Σ_d max(q_d min_d, q_d max_d)  =  q⁺·max + q⁻·min
//
// (q⁺ = max(q, 0), q⁻ = min(q, 0)): the page's bound. A KV head group's bound is the maximum
// over its query heads. Selection takes the forced pages (the sink page, the newest
// `recent` pages, and heavy hitters), then fills the budget by rank. Two forms:
//   per group (select_pages_per_group; backends with page_heads): each KV head group reads its
//     own best pages by its bound, `budget` pages per group — the K/V bytes read are those of
//     `budget` whole rows, since a group reads only its head's part of a row;
//   one list (select_pages): each group ranks the pages, and they are taken round-robin over the
//     groups' rankings (a page's rank is the order it was taken) until the budget is full.
// Ties go to the lower page index: the choice is a function of the bytes, deterministic.
//
// Invariants: the summaries of a page hold exactly the keys written to it, as the kernel reads
// them (decoded from the stored dtype); the selection holds at most max(budget, forced) pages,
// always the sink (page 0) and the newest min(recent, n) pages, in ascending order.
// Plain data in storage reserved at construction: nothing here allocates after that.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace activekv::runtime {

struct SummaryShape {
  std::uint32_t slots = 0;      // host histories (contexts that can run at once)
  std::uint32_t layers = 0;     // dense layers
  std::uint32_t pages_max = 0;  // logical pages of one context and layer
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint64_t floats() const noexcept {
    return std::uint64_t{slots} * layers * pages_max * kv_heads * 2u * head_dim;
  }
  std::uint64_t bytes() const noexcept { return floats() * sizeof(float); }
};

// Per (slot, layer, logical page, KV head): min[head_dim] then max[head_dim], fp32.
class PageSummaries {
 public:
  explicit PageSummaries(const SummaryShape& shape);
  const SummaryShape& shape() const noexcept { return shape_; }

  // The page's summary: [kv_heads][2][head_dim] (min, then max).
  const float* page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept;
  // Empties the page (min = +inf, max = −inf): its first key sets both.
  void clear(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept;
  // One key row, [kv_heads][head_dim] fp32 as the kernel reads it, joins the page.
  void add(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const float* key) noexcept;

 private:
  float* at(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept;
  SummaryShape shape_;
  std::vector<float> data_;
};

// q⁺·max + q⁻·min over one head's summary (min[dim], max[dim]), summed in 8 fixed lanes and
// then lane order: the same order for every call, so the result is deterministic. (A lane term
// q⁺_d max_d + q⁻_d min_d is max(q_d min_d, q_d max_d) exactly: one of the two products is 0.)
float page_bound(const float* q, const float* summary_min, const float* summary_max, std::uint32_t dim) noexcept;
// The same bound for a group of query heads at once, from each head's q split into q⁺ and q⁻
// (split_query): the maximum over the heads. Bit-identical to page_bound per head.
void split_query(const float* q, std::uint32_t dim, float* positive, float* negative) noexcept;
float group_bound(const float* positive, const float* negative, std::uint32_t heads, const float* summary_min,
                  const float* summary_max, std::uint32_t dim) noexcept;
// q·k in the same lane order (the tests' comparison: rounding is monotonic, so page_bound of a
// page is ≥ this for every key of the page, exactly).
float lane_dot(const float* q, const float* k, std::uint32_t dim) noexcept;

struct SelectionInput {
  std::uint32_t pages = 0;       // n: the context's pages in this layer
  std::uint32_t groups = 0;      // KV head groups
  std::uint32_t budget = 0;      // pages to read at most (forced pages may exceed it)
  std::uint32_t recent = 0;      // the newest pages, always read
  std::span<const float> bound;  // [groups][pages]: each group's bound per page
  std::span<const std::uint8_t> heavy;  // empty or [pages]: 1 = a heavy hitter, forced
};

struct SelectionScratch {
  explicit SelectionScratch(std::uint32_t groups_max, std::uint32_t pages_max);
  std::vector<std::uint32_t> order;  // [groups_max][pages_max]
  std::vector<std::uint32_t> rank;   // [pages_max]: UINT32_MAX = not selected; forced: rank_forced
  // select_pages_per_group: [groups_max][pages_max], each group's rank of each page (as `rank`).
  std::vector<std::uint32_t> group_rank;
};

inline constexpr std::uint32_t rank_forced = UINT32_MAX - 1;

// Fills scratch.rank (per page: its rank, rank_forced, or UINT32_MAX) and writes the selected
// pages, ascending, to `selected`; returns how many. All pages when budget ≥ pages.
std::uint32_t select_pages(const SelectionInput& in, SelectionScratch& scratch, std::span<std::uint32_t> selected) noexcept;

// Per-KV-head-group page lists (the kernel reads each group's own pages: AttentionBatch::page_heads).
// Every group g takes the forced pages and then its own best max(0, budget − forced) pages by its
// bound (ties to the lower page index): each group reads at most max(budget, forced) pages.
// Writes heads[p] (bit g: group g reads page p; 0: no group) for p < pages, fills
// scratch.group_rank (group g's rank of page p: 0.. by bound, rank_forced, or UINT32_MAX), and
// scratch.rank (per page: the best rank over the groups); returns the pages some group reads.
// groups ≤ 32. All pages for every group when budget ≥ pages.
std::uint32_t select_pages_per_group(const SelectionInput& in, SelectionScratch& scratch,
                                     std::span<std::uint32_t> heads) noexcept;

}  // namespace activekv::runtime
