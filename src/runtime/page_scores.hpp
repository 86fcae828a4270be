// page_scores.hpp — page scores other than the Quest bound, for ranking a group's pages
// (docs/SPARSE.md "Scores"): the true attention mass (an analysis oracle), and an estimate of the
// mass from per-page key moments (mean and per-dimension variance).
//
// A score ranks a KV head group's pages like the bound does (higher is read first); the
// selection (sparse_selection.hpp) is unchanged. Two kinds:
//   oracle   — Σ over the group's query heads of the head's softmax mass on the page, from every
//              key (page_mass_from_scores). It needs the whole layer's keys, i.e. an exact pass: an
//              analysis setting that says what the best ranking could capture at a budget, never a
//              deployable policy.
//   moments  — per page and KV head the sum and the sum of squares of its keys, per dimension
//              (PageMoments); a head's log-mass on the page is estimated as for Gaussian keys,
//              log c + s q·μ + ½ s² Σ_d q_d² σ_d², and the group's score is Σ over its heads of
//              the estimated mass normalised over the pages (moment_page_scores).
//   mixed    — the mean of two mass distributions over the pages: the moments' and the bound's
//              (softmax over the pages of scale × the group's bound, times the group's heads so
//              both sum to the heads): the bound's few peaked pages and the moments' broad ones
//              both rank high (mix_bound_mass).
// And a layer signal: the moments' estimate of the mass a selection captures, the estimated mass
// of the selected pages over that of all pages (selected_mass_share), from the same per-page
// estimates, with no key read — what the layer budgets follow in deploy mode (LayerSignal::moments).
// Invariants: the moments of a page are exactly the fp32 sums of the keys written to it (as the
// kernel reads them), in write order; nothing here allocates after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace activekv::runtime {

// Per (slot, layer, logical page, KV head): Σ k_d then Σ k_d², [head_dim] each, fp32.
class PageMoments {
 public:
  PageMoments(std::uint32_t slots, std::uint32_t layers, std::uint32_t pages_max, std::uint32_t kv_heads,
              std::uint32_t head_dim);
  // The page's moments: [kv_heads][2][head_dim].
  const float* page(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept;
  std::size_t page_elements() const noexcept { return std::size_t{kv_heads_} * 2u * head_dim_; }
  void clear(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) noexcept;
  // One decoded key row, [kv_heads][head_dim], joins the page.
  void add(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical, const float* key) noexcept;

 private:
  std::size_t offset(std::uint32_t slot, std::uint32_t layer, std::uint32_t logical) const noexcept;
  std::uint32_t slots_, layers_, pages_max_, kv_heads_, head_dim_;
  std::vector<float> data_;
};

// The oracle: scores [heads][tokens] are the scaled q·k of one group's heads over a layer's
// tokens (page p holds tokens [p × page_tokens, …)). out[p] = Σ_h Σ_{t in p} softmax_h(t),
// for p < ⌈tokens / page_tokens⌉ (so Σ_p out[p] = heads, to rounding).
void page_mass_from_scores(const float* scores, std::uint32_t heads, std::uint32_t tokens, std::uint32_t page_tokens,
                           float* out) noexcept;

// The moments' estimate for one group: q [heads][dim] (unscaled), the group's KV head's moments
// of page p at moments[p × stride] ([2][dim]: sums, sums of squares), tokens in the layer (the last
// page may be partial), scratch [heads × pages]. out[p] = Σ_h exp(e_h(p) − LSE_p' e_h(p')),
// e_h(p) = log c_p + scale q_h·μ_p + ½ scale² Σ_d q_hd² σ²_pd. It is moment_log_mass over every
// page, then moment_mass_from_log.
void moment_page_scores(const float* q, std::uint32_t heads, std::uint32_t dim, float scale, const float* moments,
                        std::size_t stride, std::uint32_t pages, std::uint32_t tokens, std::uint32_t page_tokens,
                        float* scratch, float* out) noexcept;

// The first half, page by page: e_h(p) for pages [first, first + count) into
// log[h × log_stride + p] (−∞ for a page with no row). Each page's value depends only on its own
// moments and q, so the pages may be cut into chunks run on any threads with the same bits.
// μ_d = Σk_d × (1/c) and σ²_d = max(0, Σk²_d × (1/c) − μ_d²) once per page for all the heads (1/c
// is exact for a full page of 16 or any power of two, so no division per dimension); the two dot
// products summed in 8 lanes (term d into lane d mod 8, each product rounded, no FMA) and the lanes
// as the bound's tree ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), so MomentIsa::best
// (AVX2 when dim is a multiple of 8) and MomentIsa::portable give the same bits.
enum class MomentIsa : std::uint8_t { best, portable };
void moment_log_mass(const float* q, std::uint32_t heads, std::uint32_t dim, float scale, const float* moments,
                     std::size_t stride, std::uint32_t first, std::uint32_t count, std::uint32_t tokens,
                     std::uint32_t page_tokens, float* log, std::size_t log_stride,
                     MomentIsa isa = MomentIsa::best) noexcept;

// The second half: out[p] = Σ_h softmax over the pages of log[h × log_stride + ·] at p, for
// p < pages (log is overwritten with the unnormalised weights).
void moment_mass_from_log(float* log, std::uint32_t heads, std::size_t log_stride, std::uint32_t pages,
                          float* out) noexcept;

// mixed: out[p] = w · moments[p] + (1 − w) · heads · softmax_p(scale · bound[p]), for p < pages
// (out may be bound); w = ½ (the default) is the mean of the two.
void mix_bound_mass(const float* bound, const float* moments, std::uint32_t heads, float scale, std::uint32_t pages,
                    float* out, float w = 0.5f) noexcept;

// The share of a group's estimated mass that its selection holds: mass [pages] (moment_page_scores'
// out), keep [pages] the selection's per-page KV head masks, `bit` the group's. Returns
// Σ_{p: keep[p] & bit} mass[p] / Σ_p mass[p] in [0, 1]; 1 when the total is 0 or not finite
// (nothing to miss, or no estimate: a layer with no estimate keeps its share).
float selected_mass_share(const float* mass, const std::uint32_t* keep, std::uint32_t bit, std::uint32_t pages) noexcept;

}  // namespace activekv::runtime
