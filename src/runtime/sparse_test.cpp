// sparse_test.cpp — sparse attention: the bound, the choice, and the runtime's sparse steps.
//
//   - page_bound is a true upper bound of q·k for every key of the page (random q, k; the
//     comparison is the same lane order in fp32, where rounding is monotonic, and double);
//   - select_pages keeps the sink and the newest pages, respects the budget, ascends, is
//     deterministic, and with one group takes exactly the best bounds;
//   - select_pages_per_group gives every group the forced pages and its own best pages by its
//     bound (ties to the lower page), exactly max(budget, forced) per group, deterministic;
//   - the runtime at a budget covering every page is exact mode bit for bit (with the pool
//     holding everything and with 25%, so pages are staged through the tiles);
//   - at a small budget the kernel reads fewer pages, the measured recall is in (0, 1] and
//     grows with the budget, explain names each selected page's bound and rank (per group with
//     per-group lists, each group's list holding the budget; and with one list), the adaptive
//     budget runs, layer budgets keep the total and move pages between layers, and no sparse
//     step allocates;
//   - a runtime created exact refuses set_sparse with a sparse mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "runtime/sparse_selection.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

using runtime::page_bound;
using runtime::lane_dot;

TEST(SparseBound, IsAnUpperBoundOfEveryKeyOfThePage) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> dims(1, 80), rows(1, 32);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto d = static_cast<std::uint32_t>(dims(rng));
    const int n = rows(rng);
    const float scale = trial % 3 == 0 ? 10.0f : 1.0f;
    std::vector<float> q(d), keys(std::size_t(n) * d), mn(d, INFINITY), mx(d, -INFINITY);
    for (float& x : q) x = normal(rng) * scale;
    for (int r = 0; r < n; ++r) {
      for (std::uint32_t i = 0; i < d; ++i) {
        const float k = normal(rng) * scale;
        keys[r * d + i] = k;
        mn[i] = std::min(mn[i], k);
        mx[i] = std::max(mx[i], k);
      }
    }
    const float bound = page_bound(q.data(), mn.data(), mx.data(), d);
    // The runtime's path (q split once, a group of heads, AVX2 where the CPU has it) is the same arithmetic.
    std::vector<float> qp(d), qn(d);
    runtime::split_query(q.data(), d, qp.data(), qn.data());
    const float grouped = runtime::group_bound(qp.data(), qn.data(), 1, mn.data(), mx.data(), d);
    ASSERT_EQ(std::memcmp(&grouped, &bound, sizeof(float)), 0) << "trial " << trial << " dim " << d;
    for (int r = 0; r < n; ++r) {
      const float* k = keys.data() + std::size_t(r) * d;
      ASSERT_GE(bound, lane_dot(q.data(), k, d)) << "trial " << trial << " row " << r;
      double exact = 0.0;
      for (std::uint32_t i = 0; i < d; ++i) exact += double(q[i]) * k[i];
      ASSERT_GE(double(bound), exact - 1e-5 * (1.0 + std::fabs(exact))) << "trial " << trial;
    }
  }
}

TEST(SparseSelection, KeepsSinkAndNewestRespectsTheBudgetAscendsAndIsDeterministic) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> uniform(-5.0f, 5.0f);
  const std::uint32_t pages_max = 300;
  runtime::SelectionScratch scratch(4, pages_max), again(4, pages_max);
  std::vector<std::uint32_t> selected(pages_max), selected2(pages_max);
  std::vector<float> bound(4 * pages_max);
  std::vector<std::uint8_t> heavy(pages_max);
  for (int trial = 0; trial < 1000; ++trial) {
    runtime::SelectionInput in;
    in.pages = 1 + static_cast<std::uint32_t>(rng() % pages_max);
    in.groups = 1 + static_cast<std::uint32_t>(rng() % 4);
    in.budget = static_cast<std::uint32_t>(rng() % (in.pages + 5));
    in.recent = static_cast<std::uint32_t>(rng() % 4);
    for (std::uint32_t i = 0; i < in.groups * in.pages; ++i) bound[i] = std::round(uniform(rng));  // ties too
    std::uint32_t heavy_count = 0;
    for (std::uint32_t p = 0; p < in.pages; ++p) heavy_count += heavy[p] = (rng() % 10 == 0) ? 1 : 0;
    in.bound = {bound.data(), std::size_t{in.groups} * in.pages};
    if (trial % 2 == 0) in.heavy = {heavy.data(), in.pages};
    const std::uint32_t count = runtime::select_pages(in, scratch, selected);
    const std::uint32_t count2 = runtime::select_pages(in, again, selected2);
    ASSERT_EQ(count, count2);
    ASSERT_TRUE(std::equal(selected.begin(), selected.begin() + count, selected2.begin())) << "deterministic";
    ASSERT_TRUE(std::is_sorted(selected.begin(), selected.begin() + count));
    ASSERT_TRUE(std::adjacent_find(selected.begin(), selected.begin() + count) == selected.begin() + count);
    auto has = [&](std::uint32_t p) { return std::binary_search(selected.begin(), selected.begin() + count, p); };
    if (in.budget >= in.pages) {
      ASSERT_EQ(count, in.pages);
      continue;
    }
    // (below: a budget smaller than the context)
    ASSERT_TRUE(has(0)) << "the sink page";
    for (std::uint32_t r = 0; r < std::min(in.recent, in.pages); ++r) ASSERT_TRUE(has(in.pages - 1 - r)) << "newest";
    std::uint32_t forced = 0;
    for (std::uint32_t p = 0; p < in.pages; ++p) {
      const bool f = p == 0 || p + in.recent >= in.pages || (!in.heavy.empty() && heavy[p] != 0);
      forced += f;
      if (f) {
        ASSERT_TRUE(has(p));
      }
    }
    ASSERT_EQ(count, std::max(in.budget, forced)) << "the budget, or the forced pages when they exceed it";
    if (in.groups == 1) {  // one group: the pages taken by rank carry the best bounds
      float worst_taken = INFINITY, best_left = -INFINITY;
      for (std::uint32_t p = 0; p < in.pages; ++p) {
        const std::uint32_t r = scratch.rank[p];
        if (r == runtime::rank_forced) continue;
        if (r == UINT32_MAX) {
          best_left = std::max(best_left, bound[p]);
        } else {
          worst_taken = std::min(worst_taken, bound[p]);
        }
      }
      if (worst_taken != INFINITY && best_left != -INFINITY) {
        ASSERT_GE(worst_taken, best_left);
      }
    }
  }
}

TEST(SparseSelection, PerGroupListsTakeEachGroupsBestPagesPlusTheForcedOnes) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<float> uniform(-5.0f, 5.0f);
  const std::uint32_t pages_max = 300, groups_max = 5;
  runtime::SelectionScratch scratch(groups_max, pages_max), again(groups_max, pages_max);
  std::vector<std::uint32_t> heads(pages_max), heads2(pages_max);
  std::vector<float> bound(groups_max * pages_max);
  std::vector<std::uint8_t> heavy(pages_max);
  for (int trial = 0; trial < 1000; ++trial) {
    runtime::SelectionInput in;
    in.pages = 1 + static_cast<std::uint32_t>(rng() % pages_max);
    in.groups = 1 + static_cast<std::uint32_t>(rng() % groups_max);
    in.budget = static_cast<std::uint32_t>(rng() % (in.pages + 5));
    in.recent = static_cast<std::uint32_t>(rng() % 4);
    for (std::uint32_t i = 0; i < in.groups * in.pages; ++i) bound[i] = std::round(uniform(rng));  // ties too
    for (std::uint32_t p = 0; p < in.pages; ++p) heavy[p] = (rng() % 10 == 0) ? 1 : 0;
    in.bound = {bound.data(), std::size_t{in.groups} * in.pages};
    if (trial % 2 == 0) in.heavy = {heavy.data(), in.pages};
    const std::uint32_t count = runtime::select_pages_per_group(in, scratch, heads);
    const std::uint32_t count2 = runtime::select_pages_per_group(in, again, heads2);
    ASSERT_EQ(count, count2);
    ASSERT_TRUE(std::equal(heads.begin(), heads.begin() + in.pages, heads2.begin())) << "deterministic";
    const std::uint32_t all = (1u << in.groups) - 1u;
    std::uint32_t union_count = 0;
    for (std::uint32_t p = 0; p < in.pages; ++p) {
      ASSERT_EQ(heads[p] & ~all, 0u) << "only the groups that exist";
      union_count += heads[p] != 0 ? 1u : 0u;
    }
    ASSERT_EQ(count, union_count) << "the pages some group reads";
    if (in.budget >= in.pages) {
      for (std::uint32_t p = 0; p < in.pages; ++p) ASSERT_EQ(heads[p], all);
      continue;
    }
    std::uint32_t forced = 0;
    for (std::uint32_t p = 0; p < in.pages; ++p) {
      const bool f = p == 0 || p + in.recent >= in.pages || (!in.heavy.empty() && heavy[p] != 0);
      forced += f ? 1u : 0u;
      if (f) {
        ASSERT_EQ(heads[p], all) << "forced pages (sink, newest, heavy hitters) are read by every group";
      }
    }
    for (std::uint32_t g = 0; g < in.groups; ++g) {
      const float* b = bound.data() + std::size_t{g} * in.pages;
      const std::uint32_t* rank = scratch.group_rank.data() + std::size_t{g} * in.pages;
      std::uint32_t own = 0, ranked = 0;
      float worst_taken = INFINITY, best_left = -INFINITY;
      std::uint32_t worst_taken_page = 0, best_left_page = 0;
      for (std::uint32_t p = 0; p < in.pages; ++p) {
        const bool reads = ((heads[p] >> g) & 1u) != 0;
        own += reads ? 1u : 0u;
        ASSERT_EQ(reads, rank[p] != UINT32_MAX) << "the group's rank names exactly its pages";
        if (rank[p] == runtime::rank_forced) continue;
        if (reads) {
          ++ranked;
          if (b[p] < worst_taken || (b[p] == worst_taken && p > worst_taken_page)) worst_taken = b[p], worst_taken_page = p;
        } else if (b[p] > best_left || (b[p] == best_left && p < best_left_page) || best_left == -INFINITY) {
          best_left = b[p], best_left_page = p;
        }
      }
      ASSERT_EQ(own, std::max(in.budget, forced)) << "each group: its budget, or the forced pages when they exceed it";
      ASSERT_EQ(ranked, own - forced);
      if (worst_taken != INFINITY && best_left != -INFINITY) {  // its best pages by its own bound, ties to the lower page
        ASSERT_TRUE(worst_taken > best_left || (worst_taken == best_left && worst_taken_page < best_left_page))
            << "group " << g << " trial " << trial;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The runtime: a synthetic model through sparse steps.
// ---------------------------------------------------------------------------------------------

constexpr std::uint32_t layers = 2, kv_heads = 2, head_dim = 16, q_heads = 4, page_tokens = 4;
constexpr std::uint32_t prompt = 200, decode = 12, contexts = 2, chunk = 8;

struct SparseRun {
  std::vector<float> decode_outputs;  // every decode step's outputs
  std::vector<float> all_outputs;
  SparseStats stats;
  KvCounters counters;
  std::uint64_t allocations_after_first_decode = 0;
  Explanation explanation;
};

SparseRun run(const SparseSettings& sparse, double pool_fraction, bool sparse_at_create = true) {
  SparseRun result;
  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry.dense_layers = layers;
  m.geometry.kv_heads = kv_heads;
  m.geometry.head_dim = head_dim;
  m.geometry.dtype = DType::f16;
  const std::uint64_t row_bytes = m.geometry.row_bytes();
  m.page_tokens = page_tokens;
  m.tile_tokens = 16;
  m.tiles = 2;
  m.max_context_tokens = 256;
  m.max_seqs = contexts;
  m.chunk_tokens = chunk;
  m.host_pool_bytes = std::uint64_t{contexts} * layers * m.max_context_tokens * row_bytes;
  const std::uint64_t pages = contexts * layers * ((prompt + decode) / page_tokens + 1);
  m.device_pool_bytes = 4 * arena_alignment_bytes + 2ull * 16 * row_bytes +
                        static_cast<std::uint64_t>(std::ceil(pages * pool_fraction)) * page_tokens * row_bytes;
  settings.q_heads = q_heads;
  settings.sparse = sparse_at_create ? sparse : SparseSettings{};
  BackendOptions options;
  options.seed = 1;
  options.compute_threads = 2;
  auto backend = make_backend("host", options);
  EXPECT_TRUE(backend.ok());
  if (!backend.ok()) return result;
  auto created = KvRuntime::create(settings, **backend);
  EXPECT_TRUE(created.ok()) << (created.ok() ? "" : created.error().describe());
  if (!created.ok()) return result;
  KvRuntime& rt = **created;
  if (!sparse_at_create) {
    EXPECT_FALSE(rt.set_sparse(sparse).ok()) << "an exact runtime keeps no summaries";
    return result;
  }
  std::vector<ContextId> ids;
  for (std::uint32_t c = 0; c < contexts; ++c) ids.push_back(rt.open_context(c + 1, prompt + decode)->handle);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t kv = std::size_t{kv_heads} * head_dim, qe = std::size_t{q_heads} * head_dim;
  std::vector<float> k(contexts * chunk * kv), v(k.size()), q(contexts * chunk * qe), out(q.size());
  std::vector<StepEntry> entries(contexts);
  std::uint32_t fed = 0;
  bool counting = false;
  while (fed < prompt + decode) {
    const std::uint32_t n = fed < prompt ? std::min(chunk, prompt - fed) : 1u;
    for (std::uint32_t c = 0; c < contexts; ++c) entries[c] = StepEntry{ids[c], n};
    std::uint64_t allocations = 0;
    auto counted = [&](auto&& call) {
      const std::uint64_t before = testing::heap_allocations();
      const Status status = call();
      allocations += testing::heap_allocations() - before;
      return status;
    };
    EXPECT_TRUE(counted([&] { return rt.begin_step(entries); }).ok());
    for (std::uint32_t l = 0; l < layers; ++l) {
      for (float& x : k) x = normal(rng);
      for (float& x : v) x = normal(rng);
      for (float& x : q) x = 2.0f * normal(rng);
      EXPECT_TRUE(counted([&] { return rt.write_kv(l, k.data(), v.data()); }).ok());
      const Status s = counted([&] { return rt.attend(l, q.data(), out.data()); });
      EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().describe());
      const std::size_t used = std::size_t{contexts} * n * qe;
      result.all_outputs.insert(result.all_outputs.end(), out.begin(), out.begin() + used);
      if (n == 1) result.decode_outputs.insert(result.decode_outputs.end(), out.begin(), out.begin() + used);
    }
    EXPECT_TRUE(counted([&] { return rt.end_step(); }).ok());
    if (counting) result.allocations_after_first_decode += allocations;
    counting = counting || n == 1;
    fed += n;
  }
  EXPECT_EQ(rt.check(), nullptr);
  result.stats = rt.sparse_stats();
  result.counters = rt.counters();
  result.explanation = rt.explain(ids[0]);
  for (ContextId id : ids) rt.finish(id);
  EXPECT_EQ(rt.pages_free(), rt.pages_total());
  return result;
}

bool identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SparseRuntime, ABudgetCoveringEveryPageIsExactBitForBit) {
  for (double fraction : {1.0, 0.25}) {
    const SparseRun exact = run(SparseSettings{}, fraction);
    SparseSettings all;
    all.mode = SparseMode::pages;
    all.pages = 1000;
    const SparseRun sparse = run(all, fraction);
    ASSERT_FALSE(exact.all_outputs.empty());
    EXPECT_TRUE(identical(exact.all_outputs, sparse.all_outputs)) << "pool fraction " << fraction;
    EXPECT_EQ(sparse.stats.pages_read, sparse.stats.pages_context);
    EXPECT_GT(sparse.stats.selections, 0u);
    EXPECT_EQ(exact.stats.selections, 0u) << "exact selects nothing";
    if (fraction < 1.0) {
      EXPECT_GT(sparse.counters.pages_staged, 0u) << "pages went through the tiles";
    }
  }
}

TEST(SparseRuntime, SmallBudgetsReadFewerPagesMeasureRecallAndAllocateNothing) {
  const SparseRun exact = run(SparseSettings{}, 1.0);
  double last_recall = 0.0;
  for (std::uint32_t budget : {6u, 12u, 24u}) {
    for (double fraction : {1.0, 0.25}) {
     for (bool per_group : {true, false}) {
      SparseSettings s;
      s.mode = SparseMode::pages;
      s.pages = budget;
      s.measure = true;
      s.per_group = per_group;
      const SparseRun r = run(s, fraction);
      EXPECT_EQ(r.stats.selections, std::uint64_t{decode} * contexts * layers);
      // Per group: each group reads `budget` pages' worth of its heads' rows, so the same K/V bytes.
      EXPECT_EQ(r.stats.pages_read, r.stats.selections * budget) << "budget " << budget;
      EXPECT_GT(r.stats.pages_context, r.stats.pages_read);
      EXPECT_EQ(r.stats.recall_count, r.stats.selections);
      EXPECT_GT(r.stats.mean_recall(), 0.0);
      EXPECT_LE(r.stats.mean_recall(), 1.0 + 1e-6);
      EXPECT_GT(r.stats.recall_min, 0.0);
      if (per_group) EXPECT_GE(r.stats.mean_recall(), last_recall - 1e-9) << "recall grows with the budget";
      EXPECT_EQ(r.allocations_after_first_decode, 0u) << "budget " << budget;
      EXPECT_EQ(r.counters.heap_allocations_in_steps, 0u);
      EXPECT_FALSE(identical(exact.decode_outputs, r.decode_outputs)) << "a partial read changes the output";
      // Prefill stays exact: the outputs before the first decode step are exact mode's.
      const std::size_t prefill = exact.all_outputs.size() - exact.decode_outputs.size();
      EXPECT_EQ(std::memcmp(exact.all_outputs.data(), r.all_outputs.data(), prefill * sizeof(float)), 0);
      // explain: the last step's selection of every layer (and group), with bounds and ranks.
      const Explanation& e = r.explanation;
      const std::uint32_t lists = per_group ? kv_heads : 1u;
      EXPECT_EQ(e.sparse_picks.size(), std::size_t{budget} * layers * lists);
      std::uint32_t ranked = 0;
      std::vector<std::uint32_t> per_list(std::size_t{layers} * lists, 0);
      for (const SparsePick& p : e.sparse_picks) {
        ranked += p.rank != UINT32_MAX ? 1u : 0u;
        EXPECT_EQ(p.group == UINT32_MAX, !per_group);
        ++per_list[std::size_t{p.layer} * lists + (per_group ? p.group : 0u)];
      }
      EXPECT_EQ(ranked, (budget - 3) * layers * lists) << "all but the sink and the two newest by rank";
      for (std::uint32_t c : per_list) EXPECT_EQ(c, budget) << "each group's list holds the budget";
      if (fraction == 1.0 && per_group) last_recall = r.stats.mean_recall();
     }
    }
  }
}

// Layer budgets: budget × layers spread over the layers by their missed mass; the total read per
// step stays the budget's (to rounding, half a page per layer), and no step allocates. With and without measure mode (the signal: measured, or estimated).
TEST(SparseRuntime, LayerBudgetsKeepTheTotalReadPerStep) {
  for (bool measure : {true, false}) {
    SparseSettings s;
    s.mode = SparseMode::pages;
    s.pages = 12;
    s.layer_budget = true;
    s.measure = measure;
    const SparseRun r = run(s, 1.0);
    ASSERT_EQ(r.stats.selections, std::uint64_t{decode} * contexts * layers);
    const double per_selection = r.stats.pages_read_per_selection();
    EXPECT_NEAR(per_selection, 12.0, 0.5 + 1e-9) << "measure " << measure;
    EXPECT_EQ(r.allocations_after_first_decode, 0u);
    EXPECT_EQ(r.counters.heap_allocations_in_steps, 0u);
    std::vector<std::uint32_t> per_layer(layers, 0);
    for (const SparsePick& p : r.explanation.sparse_picks) {
      if (p.group == 0) ++per_layer[p.layer];
    }
    EXPECT_NEAR(static_cast<double>(per_layer[0] + per_layer[1]), 24.0, 1.0) << "the last step's total, to rounding";
  }
}

TEST(SparseRuntime, AdaptiveAndFractionBudgetsRun) {
  SparseSettings a;
  a.mode = SparseMode::adaptive;
  a.floor_pages = 4;
  const SparseRun adaptive = run(a, 1.0);
  EXPECT_GT(adaptive.stats.selections, 0u);
  EXPECT_LT(adaptive.stats.pages_read, adaptive.stats.pages_context);
  EXPECT_GT(adaptive.stats.captured_estimate_sum, 0.0);
  EXPECT_EQ(adaptive.allocations_after_first_decode, 0u);
  SparseSettings f;
  f.mode = SparseMode::fraction;
  f.fraction = 0.125f;
  const SparseRun fraction = run(f, 1.0);
  const double share = fraction.stats.read_share();
  EXPECT_GT(share, 0.1);
  EXPECT_LT(share, 0.2);
}

TEST(SparseRuntime, AnExactRuntimeRefusesASparseSetting) {
  SparseSettings s;
  s.mode = SparseMode::pages;
  s.pages = 4;
  run(s, 1.0, false);
}

}  // namespace
}  // namespace activekv
