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
//     budget runs, layer budgets keep the total and move pages between layers (also when the
//     moments' estimate moves them: explain's budget per layer sums to the total and names the
//     score and the signal), and no sparse step allocates;
//   - the bound cut over borrowed threads (ParallelChunks), with the moments' estimate when the
//     mixed score and the moments' layer budgets ask, selects the same pages, bounds and ranks,
//     and gives the same outputs, as one thread;
//   - a runtime created exact refuses set_sparse with a sparse mode.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/explain.hpp"
#include "activekv/kv_runtime.hpp"
#include "runtime/element_codec.hpp"
#include "runtime/sparse_selection.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

using runtime::page_bound;
using runtime::lane_dot;

// Random pages of fp32 keys (so the outward rounding is exercised) and of keys already in the
// format (stored exactly), both formats; the bound the runtime computes from the stored summary
// is ≥ the same-order dot of every key (exactly) and ≥ the double-precision dot.
TEST(SparseBound, IsAnUpperBoundOfEveryKeyOfThePage) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> dims(1, 80), rows(1, 32), heads_of(1, 4);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto format = trial % 2 == 0 ? runtime::SummaryFormat::f16 : runtime::SummaryFormat::bf16;
    const bool in_format = trial % 4 >= 2;  // keys already representable: the summary is exact
    const auto d = static_cast<std::uint32_t>(dims(rng));
    const auto heads = static_cast<std::uint32_t>(heads_of(rng));
    const int n = rows(rng);
    const float scale = trial % 3 == 0 ? 10.0f : 1.0f;
    // One KV head's page through PageSummaries (one slot, layer, page and head).
    runtime::PageSummaries table(runtime::SummaryShape{1, 1, 1, 1, d, format});
    table.clear(0, 0, 0);
    std::vector<float> q(std::size_t(heads) * d), keys(std::size_t(n) * d);
    for (float& x : q) x = normal(rng) * scale;
    for (int r = 0; r < n; ++r) {
      for (std::uint32_t i = 0; i < d; ++i) {
        float k = normal(rng) * scale;
        if (in_format) k = runtime::summary_decode(format, runtime::summary_round_down(format, k));
        keys[r * d + i] = k;
      }
      table.add(0, 0, 0, keys.data() + std::size_t(r) * d);
    }
    const std::uint16_t* stored = table.page(0, 0, 0);
    std::vector<float> mn(d), mx(d);
    for (std::uint32_t i = 0; i < d; ++i) {
      mn[i] = runtime::summary_decode(format, stored[i]);
      mx[i] = runtime::summary_decode(format, stored[d + i]);
      float lo = INFINITY, hi = -INFINITY;
      for (int r = 0; r < n; ++r) lo = std::min(lo, keys[r * d + i]), hi = std::max(hi, keys[r * d + i]);
      ASSERT_LE(mn[i], lo) << "min rounded down";
      ASSERT_GE(mx[i], hi) << "max rounded up";
      if (in_format) {
        ASSERT_EQ(mn[i], lo) << "a key in the format is stored exactly";
        ASSERT_EQ(mx[i], hi);
      }
    }
    // The runtime's path (q split once, a group of heads), portable and (where the CPU has it) AVX2.
    std::vector<float> qp(q.size()), qn(q.size());
    for (std::uint32_t h = 0; h < heads; ++h) runtime::split_query(&q[h * d], d, &qp[h * d], &qn[h * d]);
    float portable = 0.0f, best = 0.0f;
    runtime::page_bounds(format, qp.data(), qn.data(), heads, stored, 0, 1, d, &portable, runtime::BoundIsa::portable);
    runtime::page_bounds(format, qp.data(), qn.data(), heads, stored, 0, 1, d, &best);
    ASSERT_EQ(std::memcmp(&portable, &best, sizeof(float)), 0) << "trial " << trial << " dim " << d;
    float reference = -INFINITY;
    for (std::uint32_t h = 0; h < heads; ++h) reference = std::max(reference, page_bound(&q[h * d], mn.data(), mx.data(), d));
    ASSERT_EQ(std::memcmp(&portable, &reference, sizeof(float)), 0) << "trial " << trial;
    for (std::uint32_t h = 0; h < heads; ++h) {
      for (int r = 0; r < n; ++r) {
        const float* k = keys.data() + std::size_t(r) * d;
        ASSERT_GE(best, lane_dot(&q[h * d], k, d)) << "trial " << trial << " row " << r;
        double exact = 0.0;
        for (std::uint32_t i = 0; i < d; ++i) exact += double(q[h * d + i]) * k[i];
        ASSERT_GE(double(best), exact - 1e-5 * (1.0 + std::fabs(exact))) << "trial " << trial;
      }
    }
  }
}

// Outward rounding at the edges: zeros, subnormals, values between two stored ones, overflow.
TEST(SparseBound, RoundsOutwardAtTheEdges) {
  using runtime::SummaryFormat;
  for (const SummaryFormat f : {SummaryFormat::f16, SummaryFormat::bf16}) {
    for (const float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.1f, -0.1f, 1.0f, 3.14159f, -2.71828f, 65504.0f,
                          70000.0f, -70000.0f, 1e30f, -1e30f}) {
      const float lo = runtime::summary_decode(f, runtime::summary_round_down(f, v));
      const float hi = runtime::summary_decode(f, runtime::summary_round_up(f, v));
      EXPECT_LE(lo, v) << v;
      EXPECT_GE(hi, v) << v;
      EXPECT_FALSE(std::isnan(lo) || std::isnan(hi)) << v;
    }
  }
  // bf16 has fp32's range: a finite key stays finite; f16 keeps f16 keys exact.
  EXPECT_TRUE(std::isfinite(runtime::summary_decode(SummaryFormat::bf16, runtime::summary_round_up(SummaryFormat::bf16, 1e30f))));
  EXPECT_EQ(runtime::summary_decode(SummaryFormat::f16, runtime::summary_round_up(SummaryFormat::f16, 0.5f)), 0.5f);
}

// A key row stored in the summary's format (the runtime's path for f16 KV) gives the same
// summary as the fp32 path: min and max exactly.
TEST(SparseBound, StoredKeysSummariseAsTheirValues) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const auto format : {runtime::SummaryFormat::f16, runtime::SummaryFormat::bf16}) {
    const std::uint32_t kv = 2, d = 24;
    runtime::PageSummaries a(runtime::SummaryShape{1, 1, 1, kv, d, format}), b = a;
    a.clear(0, 0, 0);
    b.clear(0, 0, 0);
    std::vector<float> key(kv * d);
    std::vector<std::uint16_t> bits(kv * d);
    for (int r = 0; r < 20; ++r) {
      for (std::uint32_t i = 0; i < kv * d; ++i) {
        bits[i] = runtime::summary_round_down(format, normal(rng));
        key[i] = runtime::summary_decode(format, bits[i]);
      }
      a.add(0, 0, 0, key.data());
      b.add_stored(0, 0, 0, reinterpret_cast<const std::byte*>(bits.data()));
    }
    ASSERT_EQ(std::memcmp(a.page(0, 0, 0), b.page(0, 0, 0), a.shape().page_bytes()), 0);
  }
}

// Many pages at once (the runtime's call): AVX2 and portable give the same bits for every page,
// with the page stride of a real table (3 KV heads, 64 dims), and each page's bound equals
// the one-page call's.
TEST(SparseBound, VectorisedAndPortableAreBitIdenticalOverATable) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const std::uint32_t pages = 200, kv = 3, d = 64, group = 3;
  for (const auto format : {runtime::SummaryFormat::f16, runtime::SummaryFormat::bf16}) {
    runtime::PageSummaries table(runtime::SummaryShape{1, 1, pages, kv, d, format});
    std::vector<float> key(std::size_t(kv) * d);
    for (std::uint32_t p = 0; p < pages; ++p) {
      table.clear(0, 0, p);
      for (int r = 0; r < 16; ++r) {
        for (float& x : key) x = normal(rng);
        table.add(0, 0, p, key.data());
      }
    }
    std::vector<float> q(std::size_t(group) * d), qp(q.size()), qn(q.size());
    for (float& x : q) x = normal(rng);
    for (std::uint32_t h = 0; h < group; ++h) runtime::split_query(&q[h * d], d, &qp[h * d], &qn[h * d]);
    for (std::uint32_t kh = 0; kh < kv; ++kh) {
      const std::uint16_t* first = table.page(0, 0, 0) + std::size_t{kh} * 2 * d;
      std::vector<float> a(pages), b(pages);
      runtime::page_bounds(format, qp.data(), qn.data(), group, first, table.shape().page_stride(), pages, d, a.data());
      runtime::page_bounds(format, qp.data(), qn.data(), group, first, table.shape().page_stride(), pages, d, b.data(),
                           runtime::BoundIsa::portable);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), pages * sizeof(float)), 0);
      for (std::uint32_t p = 0; p < pages; p += 37) {
        float one = 0.0f;
        runtime::page_bounds(format, qp.data(), qn.data(), group, table.page(0, 0, p) + std::size_t{kh} * 2 * d, 0, 1, d,
                             &one);
        ASSERT_EQ(std::memcmp(&one, &a[p], sizeof(float)), 0);
      }
    }
  }
  if (!runtime::page_bounds_vectorised(64)) GTEST_SKIP() << "no AVX2 + F16C here: only the portable path ran";
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
  std::uint64_t summary_bytes_checked = 0;  // arena summaries part compared with the keys written
  bool summaries_match = true;
  std::uint32_t ranks_checked = 0;  // per-group picks whose sparse_rank was checked
  bool ranks_ok = true;
};

SparseRun run(const SparseSettings& sparse, double pool_fraction, bool sparse_at_create = true,
              const ParallelChunks& parallel = {}) {
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
  // Sparse: the page summaries' own arena part (16-bit min and max per page).
  MemorySettings with_summaries = m;
  with_summaries.sparse_summaries = true;
  const std::uint64_t summary_bytes = sparse_at_create && sparse.enabled() ? summary_part_bytes(with_summaries) : 0;
  m.device_pool_bytes = 5 * arena_alignment_bytes + 2ull * 16 * row_bytes + summary_bytes +
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
  rt.set_parallel(parallel);
  if (!sparse_at_create) {
    EXPECT_FALSE(rt.set_sparse(sparse).ok()) << "an exact runtime keeps no summaries";
    return result;
  }
  std::vector<ContextId> ids;
  for (std::uint32_t c = 0; c < contexts; ++c) ids.push_back(rt.open_context(c + 1, prompt + decode)->handle);
  // What the arena's summaries part must hold: every key written, as stored (f16), per page and block.
  const MemoryPlan& plan = rt.plan();
  runtime::PageSummaries expected(runtime::SummaryShape{plan.summaries.histories, layers, plan.summaries.pages_per_layer,
                                                        kv_heads, head_dim, runtime::SummaryFormat::f16});
  std::vector<std::uint16_t> key_bits(std::size_t{kv_heads} * head_dim);
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
      for (std::uint32_t c = 0; c < contexts && plan.summaries.bytes != 0; ++c) {
        for (std::uint32_t i = 0; i < n; ++i) {
          const std::uint32_t t = fed + i;
          if (t % page_tokens == 0) expected.clear(ids[c].slot, l, t / page_tokens);
          runtime::encode_elements(DType::f16, &k[(std::size_t{c} * n + i) * kv], kv, key_bits.data());
          expected.add_stored(ids[c].slot, l, t / page_tokens, reinterpret_cast<const std::byte*>(key_bits.data()));
        }
      }
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
  if (plan.arena.summaries.size_bytes != 0) {
    const std::span<const std::byte> want = expected.bytes();
    std::vector<std::byte> got(plan.arena.summaries.size_bytes);
    auto down = (*backend)->download(plan.arena.summaries.offset_bytes, got);
    EXPECT_TRUE(down.ok());
    if (down.ok()) {
      EXPECT_EQ((*backend)->wait_host(down.value(), std::chrono::seconds(10)).value(), FenceOutcome::signalled);
      (*backend)->release_fence(down.value());
      // Each context's slot: its pages that hold keys, in every layer.
      const runtime::SummaryShape& shape = expected.shape();
      const std::uint32_t used = (prompt + decode + page_tokens - 1) / page_tokens;
      for (const ContextId id : ids) {
        for (std::uint32_t l = 0; l < shape.layers; ++l) {
          for (std::uint32_t p = 0; p < used; ++p) {
            const std::uint64_t at = expected.page_offset(id.slot, l, p), bytes = shape.page_bytes();
            result.summaries_match = result.summaries_match && std::memcmp(got.data() + at, want.data() + at, bytes) == 0;
            result.summary_bytes_checked += bytes;
          }
        }
      }
    }
  }
  result.stats = rt.sparse_stats();
  result.counters = rt.counters();
  result.explanation = rt.explain(ids[0]);
  // sparse_rank: a page ranked r in its group's list is ranked r among every page less at most
  // the forced ones; an unread page ranks after every page its group read by rank.
  for (const SparsePick& p : result.explanation.sparse_picks) {
    if (p.group == UINT32_MAX || p.rank == UINT32_MAX) continue;
    const std::uint32_t r = rt.sparse_rank(ids[0], p.layer, p.group, p.logical);
    const std::uint32_t forced = 1u + std::max(1u, sparse.recent_pages);
    result.ranks_ok = result.ranks_ok && r >= p.rank && r <= p.rank + forced;
    ++result.ranks_checked;
  }
  result.ranks_ok = result.ranks_ok && rt.sparse_rank(ids[0], layers, 0, 0) == UINT32_MAX;
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
      if (per_group) {
        EXPECT_GE(r.stats.mean_recall(), last_recall - 1e-9) << "recall grows with the budget";
      }
      EXPECT_EQ(r.allocations_after_first_decode, 0u) << "budget " << budget;
      EXPECT_EQ(r.counters.heap_allocations_in_steps, 0u);
      EXPECT_GT(r.summary_bytes_checked, 0u);
      EXPECT_TRUE(r.summaries_match) << "the arena's summaries part holds every key written, per page";
      EXPECT_EQ(exact.summary_bytes_checked, 0u) << "exact mode keeps no summaries part";
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
      // Within a group's list, a better rank never has a lower bound (explain gives the bound ranked).
      for (const SparsePick& a : per_group ? e.sparse_picks : std::vector<SparsePick>{}) {
        for (const SparsePick& b : e.sparse_picks) {
          if (a.layer != b.layer || a.group != b.group || a.rank == UINT32_MAX || b.rank == UINT32_MAX) continue;
          if (a.rank < b.rank) {
            EXPECT_GE(a.bound, b.bound) << "layer " << a.layer << " pages " << a.logical << ", " << b.logical;
          }
        }
      }
      for (std::uint32_t c : per_list) EXPECT_EQ(c, budget) << "each group's list holds the budget";
      EXPECT_TRUE(r.ranks_ok) << "sparse_rank agrees with the list's ranks";
      if (per_group) {
        EXPECT_GT(r.ranks_checked, 0u);
      }
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

// Layer budgets following the moments' estimate (LayerSignal::moments, deployable: no key read):
// with each score, with and without measure mode, the total read per step stays the budget's
// (explain's budget per layer sums to budget × layers, to rounding), the estimate is tallied for
// every selection that selected, it is a share in (0, 1], explain names the score and the signal,
// and no step allocates; explain's budget per layer is what each layer's lists hold.
TEST(SparseRuntime, LayerBudgetsByTheMomentsKeepTheTotalAndAllocateNothing) {
  for (SparseScore score : {SparseScore::bound, SparseScore::mixed}) {
    for (bool measure : {true, false}) {
      SparseSettings s;
      s.mode = SparseMode::pages;
      s.pages = 12;
      s.layer_budget = true;
      s.layer_signal = LayerSignal::moments;
      s.score = score;
      s.measure = measure;
      const SparseRun r = run(s, 1.0);
      ASSERT_EQ(r.stats.selections, std::uint64_t{decode} * contexts * layers);
      EXPECT_NEAR(r.stats.pages_read_per_selection(), 12.0, 0.5 + 1e-9);
      EXPECT_GT(r.stats.moment_estimate_count, 0u);
      EXPECT_LE(r.stats.moment_estimate_count, r.stats.selections);
      EXPECT_GT(r.stats.mean_moment_estimate(), 0.0);
      EXPECT_LE(r.stats.mean_moment_estimate(), 1.0 + 1e-6);
      EXPECT_EQ(r.allocations_after_first_decode, 0u);
      EXPECT_EQ(r.counters.heap_allocations_in_steps, 0u);
      const Explanation& e = r.explanation;
      EXPECT_EQ(e.sparse_score, sparse_score_name(score));
      EXPECT_EQ(e.sparse_layer_signal, "moments");
      ASSERT_EQ(e.sparse_layer_budget.size(), std::size_t{layers});
      std::uint32_t total = 0;
      for (std::uint32_t b : e.sparse_layer_budget) total += b;
      EXPECT_NEAR(static_cast<double>(total), 12.0 * layers, 0.5 * layers + 1e-9) << "the layer budgets sum to the total";
      std::vector<std::uint32_t> per_layer(layers, 0);
      for (const SparsePick& p : e.sparse_picks) {
        if (p.group == 0) ++per_layer[p.layer];
      }
      for (std::uint32_t l = 0; l < layers; ++l) EXPECT_EQ(per_layer[l], e.sparse_layer_budget[l]) << "layer " << l;
      const std::string text = explanation_text(e);
      EXPECT_NE(text.find(fmt::format("score {}", sparse_score_name(score))), std::string::npos) << text;
      EXPECT_NE(text.find("budget per layer (layer budgets by moments):"), std::string::npos) << text;
      const nlohmann::json j = nlohmann::json::parse(explanation_json(e));
      EXPECT_EQ(j["sparse"]["score"], sparse_score_name(score));
      EXPECT_EQ(j["sparse"]["layer_signal"], "moments");
      EXPECT_EQ(j["sparse"]["budget_by_layer"].size(), std::size_t{layers});
    }
  }
  // Without layer budgets explain gives the uniform budget, the score, and no signal.
  SparseSettings plain;
  plain.mode = SparseMode::pages;
  plain.pages = 12;
  plain.score = SparseScore::moments;
  const SparseRun r = run(plain, 1.0);
  EXPECT_EQ(r.explanation.sparse_score, "moments");
  EXPECT_TRUE(r.explanation.sparse_layer_signal.empty());
  EXPECT_EQ(r.explanation.sparse_layer_budget, std::vector<std::uint32_t>(layers, 12u));
  EXPECT_EQ(r.stats.moment_estimate_count, 0u) << "the estimate runs only for layer budgets by the moments";
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

// A second thread for ParallelChunks, started once (nothing allocated per region): it runs the
// even chunks in order while the caller runs the odd ones from the last, so chunks run
// concurrently and out of order.
class TwoThreads {
 public:
  TwoThreads() : worker_([this] { work(); }) {}
  ~TwoThreads() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }
  ParallelChunks chunks(std::uint32_t least) {
    ParallelChunks p;
    p.run = [](void* pool, ParallelChunks::Task task, void* context, std::uint32_t chunks) noexcept {
      static_cast<TwoThreads*>(pool)->run(task, context, chunks);
    };
    p.pool = this;
    p.threads = 2;
    p.least = least;
    return p;
  }
  std::uint64_t regions() const { return regions_; }
  std::uint64_t worker_chunks() const { return worker_chunks_; }

 private:
  void run(ParallelChunks::Task task, void* context, std::uint32_t chunks) noexcept {
    {
      std::lock_guard lock(mutex_);
      task_ = task;
      context_ = context;
      chunks_ = chunks;
      busy_ = true;
      ++regions_;
    }
    wake_.notify_all();
    for (std::uint32_t c = chunks; c-- > 0;) {
      if (c % 2 == 1) task(context, c);
    }
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [this] { return !busy_; });
  }
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || busy_; });
      if (stopping_) return;
      for (std::uint32_t c = 0; c < chunks_; c += 2) {
        task_(context_, c);
        ++worker_chunks_;
      }
      busy_ = false;
      wake_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  ParallelChunks::Task task_ = nullptr;
  void* context_ = nullptr;
  std::uint32_t chunks_ = 0;
  bool busy_ = false, stopping_ = false;
  std::uint64_t regions_ = 0, worker_chunks_ = 0;
  std::thread worker_;
};

// The bound cut into chunks of pages over two threads selects exactly what one thread selects:
// the same pages, bounds and ranks in explain, the same outputs bit for bit, nothing allocated;
// so does the mixed score with layer budgets by the moments (their estimate on the same chunks).
TEST(SparseRuntime, BoundsOverBorrowedThreadsSelectTheSamePagesBitForBit) {
  // The mixed score with layer budgets by the moments: the moments' log-mass runs on the same
  // chunks as the bound (sparse_bounds), so its scores and budgets must not move either.
  for (const bool moments : {false, true}) for (bool per_group : {true, false}) {
    SCOPED_TRACE(moments ? "mixed, layer budgets by the moments" : "bound");
    SparseSettings s;
    s.mode = SparseMode::pages;
    s.pages = 6;
    s.per_group = per_group;
    if (moments) {
      s.score = SparseScore::mixed;
      s.layer_budget = true;
      s.layer_signal = LayerSignal::moments;
    }
    const SparseRun one = run(s, 1.0);
    TwoThreads threads;
    const SparseRun two = run(s, 0.25, true, threads.chunks(1));
    EXPECT_GT(threads.regions(), 0u) << "the bound borrowed the threads";
    EXPECT_GT(threads.worker_chunks(), 0u);
    const SparseRun pool_sized = run(s, 1.0, true, threads.chunks(1u << 20));  // too few pages: one thread
    EXPECT_TRUE(identical(one.all_outputs, two.all_outputs));
    EXPECT_TRUE(identical(one.all_outputs, pool_sized.all_outputs));
    ASSERT_EQ(one.explanation.sparse_picks.size(), two.explanation.sparse_picks.size());
    ASSERT_FALSE(one.explanation.sparse_picks.empty());
    for (std::size_t i = 0; i < one.explanation.sparse_picks.size(); ++i) {
      const SparsePick& a = one.explanation.sparse_picks[i];
      const SparsePick& b = two.explanation.sparse_picks[i];
      EXPECT_EQ(a.layer, b.layer);
      EXPECT_EQ(a.logical, b.logical);
      EXPECT_EQ(a.rank, b.rank);
      EXPECT_EQ(a.group, b.group);
      EXPECT_EQ(std::memcmp(&a.bound, &b.bound, sizeof a.bound), 0);
    }
    EXPECT_EQ(two.allocations_after_first_decode, 0u);
    EXPECT_EQ(two.counters.heap_allocations_in_steps, 0u);
  }
}

// Heavy hitters with a fixed budget (SparseSettings::heavy_hitters, H2O): pages that kept the
// kernel's attention mass are forced (explain: rank UINT32_MAX), inside the budget — the pages
// read per selection stay the budget's — so the selection changes; nothing allocates per step.
TEST(SparseRuntime, HeavyHittersWithAFixedBudgetAreForcedWithinTheBudget) {
  for (const SparseScore score : {SparseScore::bound, SparseScore::mixed}) {
    SCOPED_TRACE(sparse_score_name(score));
    SparseSettings s;
    s.mode = SparseMode::pages;
    s.pages = 8;
    s.measure = true;
    s.score = score;
    const SparseRun plain = run(s, 1.0);
    s.heavy_hitters = true;
    const SparseRun heavy = run(s, 1.0);
    ASSERT_EQ(heavy.stats.selections, plain.stats.selections);
    EXPECT_EQ(heavy.stats.pages_read, heavy.stats.selections * 8u) << "the budget per selection";
    EXPECT_EQ(plain.stats.pages_read, heavy.stats.pages_read);
    const auto forced = [](const SparseRun& r) {
      std::size_t n = 0;
      for (const SparsePick& p : r.explanation.sparse_picks) n += p.rank == UINT32_MAX ? 1u : 0u;
      return n;
    };
    EXPECT_GT(forced(heavy), forced(plain)) << "some heavy hitter was forced besides the sink and the newest";
    EXPECT_FALSE(identical(heavy.decode_outputs, plain.decode_outputs));
    EXPECT_EQ(heavy.allocations_after_first_decode, 0u);
    EXPECT_EQ(heavy.counters.heap_allocations_in_steps, 0u);
  }
}

// Other scores (page_scores.hpp): the oracle ranks each group's pages by their true mass, so its
// measured recall is at least the bound's in every layer (the same keys and queries: the
// synthetic data do not depend on the outputs); moments and mixed run too; both allocate nothing per step
// (set at create and by set_sparse), and explain gives each page's score in rank order.
TEST(SparseRuntime, OtherScoresRankByTheirScoreAndTheOracleRecallsMost) {
  SparseSettings s;
  s.mode = SparseMode::pages;
  s.pages = 8;
  s.measure = true;
  const SparseRun bound = run(s, 1.0);
  s.score = SparseScore::oracle;
  const SparseRun oracle = run(s, 1.0);
  s.score = SparseScore::moments;
  const SparseRun moments = run(s, 1.0);
  s.score = SparseScore::mixed;
  const SparseRun mixed = run(s, 1.0);
  for (const SparseRun* r : {&oracle, &moments, &mixed}) {
    EXPECT_EQ(r->stats.selections, bound.stats.selections);
    EXPECT_EQ(r->stats.pages_read, bound.stats.pages_read) << "the same budget";
    EXPECT_EQ(r->allocations_after_first_decode, 0u);
    EXPECT_EQ(r->counters.heap_allocations_in_steps, 0u);
    for (const SparsePick& a : r->explanation.sparse_picks) {
      for (const SparsePick& b : r->explanation.sparse_picks) {
        if (a.layer == b.layer && a.group == b.group && a.rank != UINT32_MAX && b.rank != UINT32_MAX && a.rank < b.rank) {
          EXPECT_GE(a.bound, b.bound) << "explain gives the score ranked";
        }
      }
    }
  }
  EXPECT_GT(oracle.stats.mean_recall(), bound.stats.mean_recall());
  for (std::uint32_t l = 0; l < layers; ++l) {
    ASSERT_EQ(oracle.stats.recall_layer_count[l], bound.stats.recall_layer_count[l]);
    EXPECT_GE(oracle.stats.recall_layer_sum[l], bound.stats.recall_layer_sum[l] - 1e-4) << "layer " << l;
    EXPECT_GE(oracle.stats.recall_layer_sum[l], moments.stats.recall_layer_sum[l] - 1e-4) << "layer " << l;
    EXPECT_GE(oracle.stats.recall_layer_sum[l], mixed.stats.recall_layer_sum[l] - 1e-4) << "layer " << l;
  }
  EXPECT_FALSE(identical(oracle.decode_outputs, bound.decode_outputs));
}

// Per-query-head rankings: each group reads the union of its heads' own top pages, exactly the
// budget per group (the forced pages included), for every score; nothing allocates per step; the
// outputs differ from the group ranking's (another choice of pages) and the reference check of
// the property test covers the pages read.
TEST(SparseRuntime, PerHeadRankingsReadTheBudgetPerGroupAndAllocateNothing) {
  for (SparseScore score : {SparseScore::bound, SparseScore::mixed, SparseScore::oracle}) {
    SparseSettings s;
    s.mode = SparseMode::pages;
    s.pages = 8;
    s.measure = true;
    s.score = score;
    const SparseRun grouped = run(s, 1.0);
    s.per_head = true;
    const SparseRun heads = run(s, 1.0);
    ASSERT_EQ(heads.stats.selections, grouped.stats.selections);
    EXPECT_EQ(heads.stats.pages_read, heads.stats.selections * 8u) << sparse_score_name(score);
    EXPECT_EQ(heads.allocations_after_first_decode, 0u);
    EXPECT_EQ(heads.counters.heap_allocations_in_steps, 0u);
    EXPECT_GT(heads.stats.mean_recall(), 0.0);
    EXPECT_FALSE(identical(heads.decode_outputs, grouped.decode_outputs)) << sparse_score_name(score);
    std::vector<std::uint32_t> per_list(std::size_t{layers} * kv_heads, 0);
    for (const SparsePick& p : heads.explanation.sparse_picks) ++per_list[std::size_t{p.layer} * kv_heads + p.group];
    for (std::uint32_t c : per_list) EXPECT_EQ(c, 8u);
  }
}

TEST(SparseRuntime, AnExactRuntimeRefusesASparseSetting) {
  SparseSettings s;
  s.mode = SparseMode::pages;
  s.pages = 4;
  run(s, 1.0, false);
}

}  // namespace
}  // namespace activekv
