// page_scores_test.cpp — the page scores other than the bound (page_scores.hpp):
//   - PageMoments holds exactly the fp32 sums and sums of squares of the keys added, per page and
//     KV head, and clear empties one page only;
//   - page_mass_from_scores gives each page its heads' softmax mass (a double reference), summing
//     to the number of heads, a partial last page included;
//   - moment_page_scores is exact for pages whose keys are all equal (the estimate of a page of c
//     copies of k is c·exp(s q·k)), sums to the heads, and ranks a page of keys aligned with q above
//     one of keys opposed to it;
//   - moment_log_mass (the estimate's first half, page by page) is the same bits on AVX2 and the
//     portable path and in any cut of the pages into chunks, within rounding of a double reference;
//   - mix_bound_mass is the mean of the moments' masses and the bound's softmax (in place too);
//   - selected_mass_share is the selected pages' share of a group's mass, per head bit, 1 when
//     there is no mass, and on synthetic Gaussian pages the moments' estimate of the captured mass
//     follows the true recall, which the oracle's own top pages (the true mass) never undercut.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/page_scores.hpp"

namespace activekv::runtime {
namespace {

TEST(PageMoments, HoldTheSumsOfTheKeysPerPageAndHead) {
  constexpr std::uint32_t kv = 2, dim = 5;
  PageMoments m(2, 3, 4, kv, dim);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> sum(kv * dim, 0.0f), square(kv * dim, 0.0f), key(kv * dim);
  for (int r = 0; r < 7; ++r) {
    for (std::size_t i = 0; i < key.size(); ++i) {
      key[i] = normal(rng);
      sum[i] += key[i];
      square[i] += key[i] * key[i];
    }
    m.add(1, 2, 3, key.data());
    m.add(1, 2, 2, key.data());
  }
  m.clear(1, 2, 2);
  const float* p = m.page(1, 2, 3);
  for (std::uint32_t h = 0; h < kv; ++h) {
    for (std::uint32_t d = 0; d < dim; ++d) {
      EXPECT_EQ(p[h * 2 * dim + d], sum[h * dim + d]);
      EXPECT_EQ(p[h * 2 * dim + dim + d], square[h * dim + d]);
    }
  }
  for (std::size_t i = 0; i < m.page_elements(); ++i) EXPECT_EQ(m.page(1, 2, 2)[i], 0.0f) << "cleared";
  for (std::size_t i = 0; i < m.page_elements(); ++i) EXPECT_EQ(m.page(0, 2, 3)[i], 0.0f) << "another slot";
}

TEST(PageMass, IsEachPagesShareOfEveryHeadsSoftmax) {
  constexpr std::uint32_t heads = 3, tokens = 23, page = 4;  // 6 pages, the last one partial
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> scores(heads * tokens);
  for (float& s : scores) s = normal(rng);
  std::vector<float> out(6, -1.0f);
  page_mass_from_scores(scores.data(), heads, tokens, page, out.data());
  double total = 0.0;
  for (std::uint32_t p = 0; p < 6; ++p) {
    double want = 0.0;
    for (std::uint32_t h = 0; h < heads; ++h) {
      double z = 0.0, in = 0.0;
      for (std::uint32_t t = 0; t < tokens; ++t) {
        const double e = std::exp(static_cast<double>(scores[h * tokens + t]));
        z += e;
        if (t / page == p) in += e;
      }
      want += in / z;
    }
    EXPECT_NEAR(out[p], want, 1e-5) << "page " << p;
    total += out[p];
  }
  EXPECT_NEAR(total, heads, 1e-5);
}

TEST(MomentScores, AreExactForUniformPagesAndFollowTheKeys) {
  constexpr std::uint32_t heads = 2, dim = 4, page = 4, pages = 3, tokens = 10;  // page 2 holds 2 keys
  const float scale = 0.5f;
  const std::vector<float> q = {1.0f, -2.0f, 0.5f, 0.0f, 0.3f, 0.1f, -1.0f, 2.0f};
  // Page p: every key equal to keys[p].
  const std::vector<std::vector<float>> keys = {{1, 0, 0, 1}, {-1, 2, 0, 0}, {0.5f, 0.5f, -1, 1}};
  std::vector<float> moments(pages * 2 * dim, 0.0f);
  for (std::uint32_t p = 0; p < pages; ++p) {
    const float c = p == 2 ? 2.0f : 4.0f;
    for (std::uint32_t d = 0; d < dim; ++d) {
      moments[p * 2 * dim + d] = c * keys[p][d];
      moments[p * 2 * dim + dim + d] = c * keys[p][d] * keys[p][d];
    }
  }
  std::vector<float> scratch(heads * pages), out(pages);
  moment_page_scores(q.data(), heads, dim, scale, moments.data(), 2 * dim, pages, tokens, page, scratch.data(),
                     out.data());
  double total = 0.0;
  for (std::uint32_t p = 0; p < pages; ++p) {
    double want = 0.0;
    for (std::uint32_t h = 0; h < heads; ++h) {
      double z = 0.0, in = 0.0;
      for (std::uint32_t r = 0; r < pages; ++r) {
        double dot = 0.0;
        for (std::uint32_t d = 0; d < dim; ++d) dot += q[h * dim + d] * keys[r][d];
        const double e = (r == 2 ? 2.0 : 4.0) * std::exp(scale * dot);
        z += e;
        if (r == p) in = e;
      }
      want += in / z;
    }
    EXPECT_NEAR(out[p], want, 1e-5) << "page " << p;
    total += out[p];
  }
  EXPECT_NEAR(total, heads, 1e-5);

  // Keys scattered around +q against around −q: the aligned page scores higher.
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<float> two(2 * 2 * dim, 0.0f);
  for (std::uint32_t p = 0; p < 2; ++p) {
    for (std::uint32_t r = 0; r < page; ++r) {
      for (std::uint32_t d = 0; d < dim; ++d) {
        const float k = (p == 0 ? -1.0f : 1.0f) * q[d] + noise(rng);
        two[p * 2 * dim + d] += k;
        two[p * 2 * dim + dim + d] += k * k;
      }
    }
  }
  std::vector<float> out2(2);
  moment_page_scores(q.data(), 1, dim, scale, two.data(), 2 * dim, 2, 2 * page, page, scratch.data(), out2.data());
  EXPECT_GT(out2[1], out2[0]);
}

// The moments' log-mass per page and head: AVX2 and portable give the same bits, any cut of the
// pages into chunks gives the same bits as one call, the lanes' sum is within rounding of a
// double reference, a page with no row is −∞, and pages outside the call are not written.
TEST(MomentLogMass, IsTheSameBitsPortableVectorisedAndInAnyChunks) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const std::uint32_t dim : {8u, 64u, 24u, 5u}) {
    for (const std::uint32_t heads : {1u, 3u, 4u, 6u}) {
      constexpr std::uint32_t page = 16, pages = 37, stride_pad = 3;
      const std::uint32_t tokens = (pages - 2) * page + 5;  // one partial page, one page with no row
      const std::size_t stride = 2 * dim + stride_pad;      // a table's stride: moments of several heads
      std::vector<float> q(std::size_t{heads} * dim), moments(pages * stride, 0.0f);
      for (float& v : q) v = normal(rng) * 2.0f;
      for (std::uint32_t p = 0; p < pages; ++p) {
        const std::uint32_t rows = std::min(page, tokens > p * page ? tokens - p * page : 0u);
        for (std::uint32_t r = 0; r < rows; ++r) {
          for (std::uint32_t d = 0; d < dim; ++d) {
            const float k = normal(rng) + (d % 3 == 0 ? 1.5f : 0.0f);
            moments[p * stride + d] += k;
            moments[p * stride + dim + d] += k * k;
          }
        }
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
      const std::size_t ls = pages + 2;
      const float sentinel = 12345.0f;
      std::vector<float> best(heads * ls, sentinel), portable(heads * ls, sentinel), chunked(heads * ls, sentinel);
      moment_log_mass(q.data(), heads, dim, scale, moments.data(), stride, 0, pages, tokens, page, best.data(), ls);
      moment_log_mass(q.data(), heads, dim, scale, moments.data(), stride, 0, pages, tokens, page, portable.data(), ls,
                      MomentIsa::portable);
      for (std::uint32_t first = 0; first < pages; first += 5) {
        moment_log_mass(q.data(), heads, dim, scale, moments.data(), stride, first, std::min(5u, pages - first), tokens,
                        page, chunked.data(), ls);
      }
      for (std::uint32_t h = 0; h < heads; ++h) {
        for (std::uint32_t p = 0; p < ls; ++p) {
          const float b = best[h * ls + p];
          SCOPED_TRACE(::testing::Message() << "dim " << dim << " heads " << heads << " head " << h << " page " << p);
          EXPECT_EQ(std::memcmp(&b, &portable[h * ls + p], sizeof b), 0);
          EXPECT_EQ(std::memcmp(&b, &chunked[h * ls + p], sizeof b), 0);
          if (p >= pages) {
            EXPECT_EQ(b, sentinel);  // not written
            continue;
          }
          const std::uint32_t rows = std::min(page, tokens > p * page ? tokens - p * page : 0u);
          if (rows == 0) {
            EXPECT_EQ(b, -std::numeric_limits<float>::infinity());
            continue;
          }
          double mean = 0.0, spread = 0.0;
          for (std::uint32_t d = 0; d < dim; ++d) {
            const double mu = double{moments[p * stride + d]} / rows;
            const double var = std::max(0.0, double{moments[p * stride + dim + d]} / rows - mu * mu);
            const double qd = q[h * dim + d];
            mean += qd * mu;
            spread += qd * qd * var;
          }
          const double want = std::log(static_cast<double>(rows)) + scale * mean + 0.5 * scale * scale * spread;
          EXPECT_NEAR(b, want, 1e-4 * (1.0 + std::abs(want)));
        }
      }
    }
  }
}

TEST(MixedScores, AreTheMeanOfTheMomentsAndTheBoundsSoftmax) {
  const std::vector<float> bound = {3.0f, -1.0f, 7.5f, 0.0f}, moments = {0.5f, 1.0f, 0.25f, 0.25f};
  constexpr std::uint32_t heads = 2;
  const float scale = 0.5f;
  std::vector<float> out(bound.size());
  mix_bound_mass(bound.data(), moments.data(), heads, scale, 4, out.data());
  double z = 0.0, total = 0.0;
  for (float b : bound) z += std::exp(scale * static_cast<double>(b));
  for (std::size_t p = 0; p < bound.size(); ++p) {
    EXPECT_NEAR(out[p], 0.5 * (moments[p] + heads * std::exp(scale * static_cast<double>(bound[p])) / z), 1e-6);
    total += out[p];
  }
  EXPECT_NEAR(total, heads, 1e-5) << "both halves sum to the heads";
  std::vector<float> same = bound;  // in place, as the runtime calls it
  mix_bound_mass(same.data(), moments.data(), heads, scale, 4, same.data());
  for (std::size_t p = 0; p < bound.size(); ++p) EXPECT_EQ(same[p], out[p]);
  // Another weight: w of the moments and 1 − w of the bound's softmax, still summing to the heads.
  const float w = 0.75f;
  mix_bound_mass(bound.data(), moments.data(), heads, scale, 4, out.data(), w);
  total = 0.0;
  for (std::size_t p = 0; p < bound.size(); ++p) {
    EXPECT_NEAR(out[p], w * moments[p] + (1.0 - w) * heads * std::exp(scale * static_cast<double>(bound[p])) / z, 1e-6);
    total += out[p];
  }
  EXPECT_NEAR(total, heads, 1e-5);
}

TEST(SelectedMassShare, IsTheSelectedPagesShareOfTheGroupsMass) {
  const std::vector<float> mass = {0.5f, 0.25f, 0.125f, 0.125f};
  const std::vector<std::uint32_t> keep = {0b01, 0b10, 0b11, 0b00};
  EXPECT_FLOAT_EQ(selected_mass_share(mass.data(), keep.data(), 0b01, 4), 0.625f);
  EXPECT_FLOAT_EQ(selected_mass_share(mass.data(), keep.data(), 0b10, 4), 0.375f);
  EXPECT_FLOAT_EQ(selected_mass_share(mass.data(), keep.data(), ~0u, 4), 0.875f) << "one list: any bit";
  const std::vector<float> none = {0.0f, 0.0f};
  EXPECT_EQ(selected_mass_share(none.data(), keep.data(), 1u, 2), 1.0f) << "no mass: nothing missed";
  const std::vector<float> odd = {NAN, 1.0f, -2.0f, 1.0f};
  EXPECT_FLOAT_EQ(selected_mass_share(odd.data(), keep.data(), 0b10, 4), 0.5f) << "NaN and negative count 0";
}

// Synthetic pages whose keys are Gaussian around a page mean (some aligned with the query): the
// moments' estimate of the mass a selection captures follows the true recall of that selection,
// and the oracle's selection (the true mass's top pages) recalls at least as much as the moments'.
TEST(SelectedMassShare, TheMomentsEstimateFollowsTheTrueRecallAndTheOracleRecallsMost) {
  constexpr std::uint32_t heads = 3, dim = 16, page = 16, pages = 64, tokens = pages * page - 5;
  const float scale = 1.0f / 4.0f;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> q(heads * dim), keys(std::size_t{tokens} * dim), moments(std::size_t{pages} * 2 * dim, 0.0f);
  for (float& x : q) x = 1.5f * normal(rng);
  for (std::uint32_t p = 0; p < pages; ++p) {
    std::vector<float> mean(dim);
    for (float& x : mean) x = normal(rng);
    const float spread = 0.3f + 0.7f * static_cast<float>(p % 3);
    for (std::uint32_t t = p * page; t < std::min(tokens, (p + 1) * page); ++t) {
      for (std::uint32_t d = 0; d < dim; ++d) {
        const float k = mean[d] + spread * normal(rng);
        keys[std::size_t{t} * dim + d] = k;
        moments[std::size_t{p} * 2 * dim + d] += k;
        moments[std::size_t{p} * 2 * dim + dim + d] += k * k;
      }
    }
  }
  std::vector<float> scores(std::size_t{heads} * tokens);
  for (std::uint32_t h = 0; h < heads; ++h) {
    for (std::uint32_t t = 0; t < tokens; ++t) {
      float dot = 0.0f;
      for (std::uint32_t d = 0; d < dim; ++d) dot += q[h * dim + d] * keys[std::size_t{t} * dim + d];
      scores[std::size_t{h} * tokens + t] = scale * dot;
    }
  }
  std::vector<float> truth(pages), estimate(pages), scratch(std::size_t{heads} * pages);
  page_mass_from_scores(scores.data(), heads, tokens, page, truth.data());
  moment_page_scores(q.data(), heads, dim, scale, moments.data(), 2 * dim, pages, tokens, page, scratch.data(),
                     estimate.data());
  const auto top = [&](const std::vector<float>& by, std::uint32_t budget) {
    std::vector<std::uint32_t> order(pages), keep(pages, 0u);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return by[a] > by[b]; });
    for (std::uint32_t i = 0; i < budget; ++i) keep[order[i]] = 1u;
    return keep;
  };
  for (std::uint32_t budget : {4u, 8u, 16u, 32u}) {
    const std::vector<std::uint32_t> by_moments = top(estimate, budget), by_truth = top(truth, budget);
    const float recall = selected_mass_share(truth.data(), by_moments.data(), 1u, pages);
    const float estimated = selected_mass_share(estimate.data(), by_moments.data(), 1u, pages);
    const float oracle = selected_mass_share(truth.data(), by_truth.data(), 1u, pages);
    EXPECT_GE(oracle, recall) << "budget " << budget;
    EXPECT_NEAR(estimated, recall, 0.15f) << "budget " << budget;
    EXPECT_GT(recall, static_cast<float>(budget) / pages) << "better than reading pages at random";
  }
}

}  // namespace
}  // namespace activekv::runtime
