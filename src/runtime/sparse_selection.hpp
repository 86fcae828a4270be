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
// Invariants: the summary of a page contains every key written to it, as the kernel reads them
// (decoded from the stored dtype): stored in 16 bits rounded outward, exactly the per-dimension
// min and max when the keys are already in that format (f16 KV: f16 summaries); the selection holds at most max(budget, forced) pages,
// always the sink (page 0) and the newest min(recent, n) pages, in ascending order.
// Plain data in storage reserved at construction: nothing here allocates after that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "activekv/geometry.hpp"

namespace activekv::runtime {

// How a summary element is stored: 16 bits, rounded outward (min down, max up), so the stored
// range contains every key of the page and the bound stays an upper bound. f16 for f16 KV and
// bf16 otherwise: a key already in the format is stored exactly (no rounding at all), and bf16
// has fp32's range, so an f32 key never overflows to an infinity.
enum class SummaryFormat : std::uint8_t { f16, bf16 };
SummaryFormat summary_format_for(DType kv_dtype) noexcept;
// True when keys of this dtype are stored as they are (add_stored): f16 → f16, bf16 → bf16.
bool summary_stores_dtype(SummaryFormat format, DType kv_dtype) noexcept;
std::uint16_t summary_round_down(SummaryFormat format, float value) noexcept;  // the largest stored value ≤ value
std::uint16_t summary_round_up(SummaryFormat format, float value) noexcept;    // the smallest stored value ≥ value
float summary_decode(SummaryFormat format, std::uint16_t bits) noexcept;       // exact

struct SummaryShape {
  std::uint32_t slots = 0;      // host histories (contexts that can run at once)
  std::uint32_t layers = 0;     // dense layers
  std::uint32_t pages_max = 0;  // logical pages of one context and layer
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  SummaryFormat format = SummaryFormat::f16;
  // Summaries of one slot: its layers, each holding its pages in order, so a layer's pages lie
  // back to back and the bound streams them (what one step changes is one range per layer).
  std::uint64_t elements() const noexcept { return std::uint64_t{slots} * pages_max * layers * page_elements(); }
  // Elements from one page of a layer to the next of the same layer.
  std::size_t page_stride() const noexcept { return static_cast<std::size_t>(page_elements()); }
  std::uint64_t page_elements() const noexcept { return std::uint64_t{kv_heads} * 2u * head_dim; }
  std::uint64_t page_bytes() const noexcept { return page_elements() * sizeof(std::uint16_t); }
  std::uint64_t bytes() const noexcept { return elements() * sizeof(std::uint16_t); }
};

// Per (slot, layer, logical page, KV head): min[head_dim] then max[head_dim], 16-bit
// (SummaryFormat), rounded outward. The host copy; the runtime mirrors it into the arena's
// summaries part (docs/SPARSE.md "Where").
class PageSummaries {
 public:
  explicit PageSummaries(const SummaryShape& shape);
  const SummaryShape& shape() const noexcept { return shape_; }

  // The page's summary: [kv_heads][2][head_dim] (min, then max).
  const std::uint16_t* page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept;
  // Byte offset of the page's summary in the table (and in the arena part, which has its layout).
  std::uint64_t page_offset(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept;
  std::span<const std::byte> bytes() const noexcept;
  // Empties the page (min = +inf, max = −inf): its first key sets both.
  void clear(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept;
  // One key row, [kv_heads][head_dim] fp32 as the kernel reads it, joins the page.
  void add(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const float* key) noexcept;
  // The same for a key row stored in the summary's own format ([kv_heads][head_dim] 16-bit
  // elements, e.g. the K half of an f16 row for f16 summaries): exact, no conversion.
  void add_stored(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const std::byte* key) noexcept;

 private:
  std::uint16_t* at(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept;
  SummaryShape shape_;
  std::vector<std::uint16_t> data_;
};

// The bound's arithmetic. Per query head: Σ_d (q⁺_d · max_d + q⁻_d · min_d), each term's two
// products rounded and added, the term added into lane d mod 8, then the lanes summed as a tree
// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): one fixed sequence of IEEE operations, so
// every implementation (portable, AVX2) gives the same bits, and rounding being monotonic, the
// result is ≥ lane_dot(q, k) for every key k inside [min, max]. (A term is max(q_d min_d,
// q_d max_d) exactly: one of its two products is 0.)
//
// page_bound: one head, fp32 min and max (the reference).
float page_bound(const float* q, const float* summary_min, const float* summary_max, std::uint32_t dim) noexcept;
// q split once into q⁺ and q⁻ (for page_bounds).
void split_query(const float* q, std::uint32_t dim, float* positive, float* negative) noexcept;
// The runtime's loop: for `count` pages, the page at first + p × stride elements being one KV
// head's [2][dim] stored summary, the maximum of the bound over `heads` query heads (q⁺, q⁻ of
// each: [heads][dim]) into out[p]. Bit-identical to page_bound over the decoded summary, head
// by head, whichever implementation runs.
enum class BoundIsa : std::uint8_t { best, portable };
void page_bounds(SummaryFormat format, const float* positive, const float* negative, std::uint32_t heads,
                 const std::uint16_t* first, std::size_t stride, std::uint32_t count, std::uint32_t dim, float* out,
                 BoundIsa isa = BoundIsa::best) noexcept;
bool page_bounds_vectorised(std::uint32_t dim) noexcept;  // BoundIsa::best runs AVX2 code for this dim
// q·k in the same lane order (the tests' comparison).
float lane_dot(const float* q, const float* k, std::uint32_t dim) noexcept;

struct SelectionInput {
  std::uint32_t pages = 0;       // n: the context's pages in this layer
  std::uint32_t groups = 0;      // KV head groups
  std::uint32_t budget = 0;      // pages to read at most (forced pages may exceed it)
  std::uint32_t recent = 0;      // the newest pages, always read
  std::span<const float> bound;  // [groups][bound_stride]: each group's bound per page
  std::size_t bound_stride = 0;  // floats from one group's bounds to the next; 0: `pages`
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
