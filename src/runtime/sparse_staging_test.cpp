// sparse_staging_test.cpp — under a sparse selection, only the pages the kernel reads are copied
// through the tiles (docs/SPARSE.md "Staging"; kv_runtime_sparse_staging.cpp).
//
// A synthetic model (2 dense layers, 2 KV heads × 16, f16, page 4 tokens) with a device pool
// holding 25% of the contexts' pages, so most of the history is staged through two small tiles in
// several passes per layer; two contexts prefill 200 tokens and decode 16, reading 6 pages of ~53
// per layer. For each staging (every page, predicted with misses, selected after the query):
//   - every output (prefill and decode) is the same bits as staging every page at the same
//     budget, and as the pool holding every page (the kernel reads the same pages in the same
//     order, whatever was copied and whatever the budget);
//   - the pages not resident split exactly into read (copied after the query, predicted, missed),
//     copied but not read, and neither; the bytes staged are exactly the pages copied; every
//     page holds no page the kernel reads without copying it (asserted in the runtime);
//   - predicted stages far fewer bytes than every page, and has misses (the random queries change
//     the selection); selected copies exactly the selected pages: no miss, nothing unread;
//   - explain names, per selected page, how it arrived, and the context's counts add up;
//   - on the host backend no step allocates after the first decode step.
// The same runs on OpenCL where it is built and has a device (PoCL in the tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/kv_runtime.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

constexpr std::uint32_t layers = 2, kv_heads = 2, head_dim = 16, q_heads = 4, page_tokens = 4;
constexpr std::uint32_t prompt = 200, decode = 16, contexts = 2, chunk = 8, budget_pages = 6;

struct BackendParam {
  const char* name;
  bool deterministic;
};

struct StagingRun {
  bool ran = false;
  std::vector<float> outputs;
  KvCounters counters;
  SparseStats stats;
  Explanation explanation;
  std::uint64_t page_bytes = 0;
  std::uint64_t allocations_after_first_decode = 0;
};

std::unique_ptr<Backend> backend_named(const BackendParam& param) {
  if (!backend_built(param.name)) return nullptr;
  BackendOptions options;
  options.deterministic = param.deterministic;
  options.seed = 1;
  options.compute_threads = 2;
  auto made = make_backend(param.name, options);
  return made.ok() ? std::move(made.value()) : nullptr;
}

// leave_early: the second context finishes when the prompts are in, so the first may borrow the
// pages it frees and its policy promotes staged pages out of the tiles (extend_run, hot pages).
StagingRun run(const BackendParam& param, SparseStaging staging, double pool_fraction,
               ResidencyPolicyKind policy = ResidencyPolicyKind::exact, bool leave_early = false) {
  StagingRun result;
  auto backend = backend_named(param);
  if (backend == nullptr) return result;
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
  MemorySettings with_summaries = m;  // the summaries' arena part comes on top of the pages
  with_summaries.sparse_summaries = true;
  const std::uint64_t summary_bytes = summary_part_bytes(with_summaries);
  m.device_pool_bytes = 5 * arena_alignment_bytes + 2ull * 16 * row_bytes + summary_bytes +
                        static_cast<std::uint64_t>(std::ceil(pages * pool_fraction)) * page_tokens * row_bytes;
  settings.q_heads = q_heads;
  settings.policy = policy;
  settings.sparse.mode = SparseMode::pages;
  settings.sparse.pages = budget_pages;
  settings.sparse.staging = staging;
  auto created = KvRuntime::create(settings, *backend);
  EXPECT_TRUE(created.ok()) << (created.ok() ? "" : created.error().describe());
  if (!created.ok()) return result;
  KvRuntime& rt = **created;
  result.page_bytes = rt.plan().arena.page_bytes;
  std::vector<ContextId> ids;
  for (std::uint32_t c = 0; c < contexts; ++c) ids.push_back(rt.open_context(c + 1, prompt + decode)->handle);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t kv = std::size_t{kv_heads} * head_dim, qe = std::size_t{q_heads} * head_dim;
  std::vector<float> k(contexts * chunk * kv), v(k.size()), q(contexts * chunk * qe), out(q.size());
  std::vector<StepEntry> entries(contexts);
  bool counting = false;
  std::uint32_t active = contexts;
  for (std::uint32_t fed = 0; fed < prompt + decode;) {
    const std::uint32_t n = fed < prompt ? std::min(chunk, prompt - fed) : 1u;
    if (leave_early && n == 1 && active == contexts) {
      rt.finish(ids[contexts - 1]);
      active = contexts - 1;
    }
    for (std::uint32_t c = 0; c < active; ++c) entries[c] = StepEntry{ids[c], n};
    const std::uint64_t before = testing::heap_allocations();
    EXPECT_TRUE(rt.begin_step({entries.data(), active}).ok());
    for (std::uint32_t l = 0; l < layers; ++l) {
      for (float& x : k) x = normal(rng);
      for (float& x : v) x = normal(rng);
      for (float& x : q) x = 2.0f * normal(rng);
      EXPECT_TRUE(rt.write_kv(l, k.data(), v.data()).ok());
      const Status s = rt.attend(l, q.data(), out.data());
      EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().describe());
      result.outputs.insert(result.outputs.end(), out.begin(), out.begin() + std::size_t{active} * n * qe);
    }
    EXPECT_TRUE(rt.end_step().ok());
    if (counting) result.allocations_after_first_decode += testing::heap_allocations() - before;
    counting = counting || n == 1;
    fed += n;
  }
  EXPECT_EQ(rt.check(), nullptr);
  result.counters = rt.counters();
  result.stats = rt.sparse_stats();
  result.explanation = rt.explain(ids[0]);
  for (std::uint32_t c = 0; c < active; ++c) rt.finish(ids[c]);
  EXPECT_EQ(rt.pages_free(), rt.pages_total());
  result.ran = true;
  return result;
}

bool identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::uint64_t pages_copied(const KvCounters& c) {
  return c.pages_stage_selected + c.pages_stage_predicted + c.pages_stage_missed + c.pages_stage_unselected;
}

class SparseStagingRuntime : public ::testing::TestWithParam<BackendParam> {};

TEST_P(SparseStagingRuntime, CopiesOnlyWhatTheKernelReadsWithTheSameOutputBits) {
  const BackendParam param = GetParam();
  const StagingRun resident = run(param, SparseStaging::predicted, 1.0);
  if (!resident.ran) GTEST_SKIP() << "backend " << param.name << " is not built here or has no device";
  const StagingRun every = run(param, SparseStaging::every, 0.25);
  const StagingRun predicted = run(param, SparseStaging::predicted, 0.25);
  const StagingRun selected = run(param, SparseStaging::selected, 0.25);
  ASSERT_TRUE(every.ran && predicted.ran && selected.ran);
  ASSERT_FALSE(HasFailure());
  const StagingRun* runs[] = {&every, &predicted, &selected};
  const char* names[] = {"every", "predicted", "selected"};
  for (int i = 0; i < 3; ++i) {
    const StagingRun& r = *runs[i];
    const KvCounters& c = r.counters;
    std::printf("%s %s: staged %llu B, pages not resident %llu: read %llu (after the query %llu, predicted %llu, "
                "missed %llu), copied unread %llu, skipped %llu; pages read %llu of %llu\n",
                param.name, names[i], static_cast<unsigned long long>(c.bytes_staged),
                static_cast<unsigned long long>(c.pages_staged),
                static_cast<unsigned long long>(c.pages_stage_selected + c.pages_stage_predicted + c.pages_stage_missed),
                static_cast<unsigned long long>(c.pages_stage_selected),
                static_cast<unsigned long long>(c.pages_stage_predicted),
                static_cast<unsigned long long>(c.pages_stage_missed),
                static_cast<unsigned long long>(c.pages_stage_unselected),
                static_cast<unsigned long long>(c.pages_stage_skipped),
                static_cast<unsigned long long>(r.stats.pages_read),
                static_cast<unsigned long long>(r.stats.pages_context));
    EXPECT_TRUE(identical(every.outputs, r.outputs)) << names[i] << ": outputs differ from staging every page";
    EXPECT_TRUE(identical(resident.outputs, r.outputs)) << names[i] << ": outputs differ from the pool holding every page";
    EXPECT_EQ(r.stats.selections, std::uint64_t{decode} * contexts * layers) << names[i];
    EXPECT_GT(c.pages_staged, 0u) << names[i] << ": the pool must be too small to hold the contexts";
    // Every page not resident is exactly one of: read (three ways), copied unread, neither.
    EXPECT_EQ(pages_copied(c) + c.pages_stage_skipped, c.pages_staged) << names[i];
    EXPECT_EQ(c.bytes_staged, pages_copied(c) * r.page_bytes) << names[i] << ": bytes staged are the pages copied";
    EXPECT_EQ(c.failed_steps, 0u);
    EXPECT_EQ(c.quarantines, 0u);
    if (std::string_view(param.name) == "host") {
      EXPECT_EQ(r.allocations_after_first_decode, 0u) << names[i];
      EXPECT_EQ(c.heap_allocations_in_steps, 0u) << names[i];
    }
    // explain: each selected page says how it arrived; the context's counts add up.
    const Explanation& e = r.explanation;
    ASSERT_FALSE(e.sparse_picks.empty());
    std::uint32_t staged_picks = 0;
    for (const SparsePick& p : e.sparse_picks) staged_picks += p.staging != PickStaging::resident ? 1u : 0u;
    EXPECT_GT(staged_picks, 0u) << names[i] << ": some selected pages were staged in the last step";
    EXPECT_GT(e.sparse_stage_skipped + e.sparse_stage_unselected, 0u) << names[i];
    EXPECT_NE(explanation_text(e).find("pages not resident:"), std::string::npos);
  }
  // Every page: the unselected ones are copied too; nothing predicted, nothing missed, nothing skipped.
  EXPECT_EQ(every.counters.pages_stage_skipped, 0u);
  EXPECT_EQ(every.counters.pages_stage_missed + every.counters.pages_stage_predicted, 0u);
  EXPECT_GT(every.counters.pages_stage_unselected, 0u);
  // Predicted: before the query the previous selection's pages; the random queries change the
  // selection, so some selected pages were missed and copied in attend, some predicted ones unread.
  EXPECT_GT(predicted.counters.pages_stage_predicted, 0u);
  EXPECT_GT(predicted.counters.pages_stage_missed, 0u);
  EXPECT_GT(predicted.counters.pages_stage_skipped, 0u);
  EXPECT_LT(predicted.counters.bytes_staged, every.counters.bytes_staged);
  // The pages read are the same whatever was copied.
  const auto read = [](const KvCounters& c) { return c.pages_stage_selected + c.pages_stage_predicted + c.pages_stage_missed; };
  EXPECT_EQ(read(predicted.counters), read(every.counters));
  EXPECT_EQ(read(selected.counters), read(every.counters));
  // Selected: exactly the pages read (the exact policy promotes nothing): no miss, nothing unread.
  EXPECT_EQ(selected.counters.pages_stage_missed + selected.counters.pages_stage_predicted, 0u);
  EXPECT_EQ(selected.counters.pages_stage_unselected, 0u);
  EXPECT_EQ(pages_copied(selected.counters), read(every.counters));
  EXPECT_LT(selected.counters.bytes_staged, predicted.counters.bytes_staged);
  std::printf("%s: bytes staged, predicted / every = %.3f, selected / every = %.3f\n", param.name,
              double(predicted.counters.bytes_staged) / double(every.counters.bytes_staged),
              double(selected.counters.bytes_staged) / double(every.counters.bytes_staged));
}

// The hotness policy promotes staged pages out of the tiles: a promotion's page is copied whatever
// was selected, and the outputs stay the same bits.
TEST_P(SparseStagingRuntime, PromotionsStillCopyTheirPagesAndOutputsStayTheSame) {
  const BackendParam param = GetParam();
  const StagingRun every = run(param, SparseStaging::every, 0.25, ResidencyPolicyKind::hotness, true);
  if (!every.ran) GTEST_SKIP() << "backend " << param.name << " is not built here or has no device";
  for (SparseStaging staging : {SparseStaging::predicted, SparseStaging::selected}) {
    const StagingRun r = run(param, staging, 0.25, ResidencyPolicyKind::hotness, true);
    ASSERT_TRUE(r.ran);
    std::printf("%s %s, hotness: promotions %llu, staged %llu B (every page: %llu B), copied unread %llu\n",
                param.name, sparse_staging_name(staging), static_cast<unsigned long long>(r.counters.promotions),
                static_cast<unsigned long long>(r.counters.bytes_staged),
                static_cast<unsigned long long>(every.counters.bytes_staged),
                static_cast<unsigned long long>(r.counters.pages_stage_unselected));
    EXPECT_TRUE(identical(every.outputs, r.outputs)) << sparse_staging_name(staging);
    EXPECT_EQ(r.counters.promotions, every.counters.promotions) << "the plan, promotions included, does not change";
    EXPECT_EQ(pages_copied(r.counters) + r.counters.pages_stage_skipped, r.counters.pages_staged);
    EXPECT_LT(r.counters.bytes_staged, every.counters.bytes_staged);
    if (staging == SparseStaging::selected) {
      EXPECT_LE(r.counters.pages_stage_unselected, r.counters.promotions) << "only promotions copy an unread page";
    }
    EXPECT_EQ(r.counters.failed_steps, 0u);
  }
  EXPECT_GT(every.counters.promotions, 0u) << "the hotness policy promoted pages from the tiles";
}

INSTANTIATE_TEST_SUITE_P(Backends, SparseStagingRuntime,
                         ::testing::Values(BackendParam{"host", false}, BackendParam{"host", true},
                                           BackendParam{"opencl", false}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.name) +
                                  (param_info.param.deterministic ? "_deterministic" : "");
                         });

}  // namespace
}  // namespace activekv
