// kv_runtime_test.cpp — a synthetic model's KV through the runtime, checked against the oracle.
//
// A small geometry (2 dense layers, 2 KV heads × 16, f16, 4 query heads) and
// random K, V and q drive the runtime exactly as an engine would: prefill in
// chunks, then batched decode, two contexts of different lengths. Every step:
//   - attention outputs equal ReferenceKv's paged attention within
//     reference_tolerance (the kernel's dot products may associate differently);
//   - every new row's authoritative host copy equals the encoded row, byte for byte;
//   - the runtime's calls allocate nothing on the heap, and the backend nothing
//     on the device.
// Across device budgets (the pool holding 100%, 25% and 5% of the contexts'
// pages) and both policies, outputs are BIT-IDENTICAL while the bytes staged
// differ. At the end every page and every history comes back.
// The same checks run on the host backend (threaded and deterministic) and on
// OpenCL where it is built and has a device (skipped otherwise).
#include "activekv/kv_runtime.hpp"

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
#include "runtime/reference_kv.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

using runtime::ReferenceKv;

// Outputs of order 1 from unit-variance data over ≤ 512 keys, fp32 both sides,
// differing only in summation order inside a dot product: 2e-5 absolute.
constexpr float reference_tolerance = 2e-5f;

struct Scenario {
  std::uint32_t dense_layers = 2;
  std::uint32_t kv_heads = 2;
  std::uint32_t head_dim = 16;
  std::uint32_t q_heads = 4;
  DType dtype = DType::f16;
  std::uint32_t page_tokens = 4;
  std::uint32_t tile_tokens = 16;
  std::uint32_t tiles = 2;
  std::uint32_t max_context = 512;
  std::uint32_t chunk_tokens = 8;
  std::vector<std::uint32_t> prompts = {440, 280};  // prefill lengths per context
  std::uint32_t decode_steps = 16;                  // the first context decodes longer
  std::uint32_t decode_extra_first = 24;
  double pool_fraction = 1.0;  // of the pages every context needs at its final length
  ResidencyPolicyKind policy = ResidencyPolicyKind::exact;
  bool prefill_without_attention = false;  // prompts land through attend_none()
  std::uint64_t seed = 1;

  Geometry geometry() const {
    Geometry g;
    g.dense_layers = dense_layers;
    g.kv_heads = kv_heads;
    g.head_dim = head_dim;
    g.dtype = dtype;
    return g;
  }
  std::uint32_t final_length(std::size_t c) const { return prompts[c] + decode_steps + (c == 0 ? decode_extra_first : 0); }
};

KvRuntimeSettings settings_for(const Scenario& s) {
  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = s.geometry();
  const std::uint64_t row_bytes = m.geometry.row_bytes();
  const std::uint64_t page_bytes = row_bytes * s.page_tokens;
  m.page_tokens = s.page_tokens;
  m.tile_tokens = s.tile_tokens;
  m.tiles = s.tiles;
  m.max_context_tokens = s.max_context;
  m.max_seqs = static_cast<std::uint32_t>(s.prompts.size());
  m.chunk_tokens = s.chunk_tokens;
  m.host_pool_bytes = std::uint64_t{m.max_seqs} * s.dense_layers * s.max_context * row_bytes;
  std::uint64_t pages_needed = 0;
  for (std::size_t c = 0; c < s.prompts.size(); ++c) {
    pages_needed += std::uint64_t{s.dense_layers} * ((s.final_length(c) + s.page_tokens - 1) / s.page_tokens);
  }
  const auto pages = static_cast<std::uint64_t>(std::ceil(static_cast<double>(pages_needed) * s.pool_fraction));
  m.device_pool_bytes = 4 * arena_alignment_bytes + std::uint64_t{s.tiles} * s.tile_tokens * row_bytes + pages * page_bytes;
  settings.q_heads = s.q_heads;
  settings.policy = s.policy;
  return settings;
}

// Deterministic data for (step, layer, what): the same whatever the budget.
void fill_random(std::vector<float>& v, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  v.resize(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = normal(rng);
}

struct RunResult {
  std::vector<float> outputs;  // every attend() output of every step, in order
  KvCounters counters;
  std::uint64_t heap_allocations_in_steps = 0;  // inside the runtime's step calls, after the first step
  std::uint32_t pages_total = 0;
};

// Runs the scenario; returns everything the cross-run comparisons need.
void run_scenario(const Scenario& s, Backend& backend, RunResult& result) {
  const KvRuntimeSettings settings = settings_for(s);
  auto created = KvRuntime::create(settings, backend);
  EXPECT_TRUE(created.ok()) << (created.ok() ? "" : created.error().describe());
  if (!created.ok()) return;
  KvRuntime& rt = *created.value();
  const Geometry g = s.geometry();
  ReferenceKv reference(g, s.q_heads, s.page_tokens);

  std::vector<ContextId> contexts;
  for (std::size_t c = 0; c < s.prompts.size(); ++c) {
    auto admitted = rt.open_context(c + 1, s.final_length(c));
    EXPECT_TRUE(admitted.ok());
    EXPECT_EQ(admitted->outcome, AdmitOutcome::admitted);
    contexts.push_back(admitted->handle);
    reference.open();
  }

  const std::size_t kv_elems = std::size_t{g.kv_heads} * g.head_dim;
  const std::size_t q_elems = std::size_t{s.q_heads} * g.head_dim;
  std::vector<std::uint32_t> fed(s.prompts.size(), 0);
  std::vector<bool> finished(s.prompts.size(), false);
  std::vector<StepEntry> entries;
  entries.reserve(s.prompts.size());
  std::vector<float> k, v, q, expected;
  std::vector<float> out(std::size_t{s.chunk_tokens} * s.prompts.size() * q_elems);
  std::uint64_t step = 0;
  bool first_step = true;
  for (;;) {
    // Each context feeds a prefill chunk until its prompt is in, then one token a step.
    entries.clear();
    for (std::size_t c = 0; c < s.prompts.size(); ++c) {
      if (fed[c] >= s.final_length(c)) continue;
      const std::uint32_t n = fed[c] < s.prompts[c] ? std::min(s.chunk_tokens, s.prompts[c] - fed[c]) : 1u;
      entries.push_back(StepEntry{contexts[c], n});
    }
    if (entries.empty()) break;
    std::uint32_t total = 0;
    for (const auto& e : entries) total += e.tokens_new;

    std::uint64_t allocations = 0;
    auto counted = [&](auto&& call) {
      const std::uint64_t before = testing::heap_allocations();
      auto status = call();
      allocations += testing::heap_allocations() - before;
      return status;
    };
    const Status begun = counted([&] { return rt.begin_step(entries); });
    EXPECT_TRUE(begun.ok()) << (begun.ok() ? "" : begun.error().describe());
    if (!begun.ok()) return;
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      const std::uint64_t seed = s.seed * 1'000'003 + step * 131 + l;
      fill_random(k, total * kv_elems, seed * 3 + 0);
      fill_random(v, total * kv_elems, seed * 3 + 1);
      fill_random(q, total * q_elems, seed * 3 + 2);
      const Status written = counted([&] { return rt.write_kv(l, k.data(), v.data()); });
      EXPECT_TRUE(written.ok()) << (written.ok() ? "" : written.error().describe());
      const bool prefill = std::all_of(entries.begin(), entries.end(), [](const StepEntry& e) { return e.tokens_new > 1; });
      const bool no_queries = s.prefill_without_attention && prefill;
      const Status attended = counted([&] { return no_queries ? rt.attend_none(l) : rt.attend(l, q.data(), out.data()); });
      EXPECT_TRUE(attended.ok()) << (attended.ok() ? "" : attended.error().describe());
      if (!attended.ok()) return;
      if (no_queries) {
        std::uint32_t row = 0;
        for (std::size_t e = 0; e < entries.size(); ++e) {
          const auto c = static_cast<std::uint32_t>(
              std::find(contexts.begin(), contexts.end(), entries[e].context) - contexts.begin());
          reference.append(c, l, k.data() + row * kv_elems, v.data() + row * kv_elems, entries[e].tokens_new);
          row += entries[e].tokens_new;
        }
        continue;
      }
      // The oracle.
      std::uint32_t row = 0;
      for (std::size_t e = 0; e < entries.size(); ++e) {
        const auto c = static_cast<std::uint32_t>(
            std::find(contexts.begin(), contexts.end(), entries[e].context) - contexts.begin());
        const std::uint32_t n = entries[e].tokens_new;
        EXPECT_EQ(rt.position_first(static_cast<std::uint32_t>(e)), fed[c]);
        reference.append(c, l, k.data() + row * kv_elems, v.data() + row * kv_elems, n);
        expected.resize(n * q_elems);
        reference.attend(c, l, q.data() + row * q_elems, n, fed[c], expected.data());
        for (std::size_t i = 0; i < n * q_elems; ++i) {
          ASSERT_NEAR(out[row * q_elems + i], expected[i], reference_tolerance)
              << "step " << step << " layer " << l << " entry " << e << " element " << i;
        }
        row += n;
      }
      result.outputs.insert(result.outputs.end(), out.begin(), out.begin() + total * q_elems);
    }
    const Status ended = counted([&] { return rt.end_step(); });
    EXPECT_TRUE(ended.ok()) << (ended.ok() ? "" : ended.error().describe());
    if (!first_step) result.heap_allocations_in_steps += allocations;
    first_step = false;

    // Data: every row written this step is on the host, as encoded.
    for (const auto& e : entries) {
      const auto c = static_cast<std::uint32_t>(std::find(contexts.begin(), contexts.end(), e.context) - contexts.begin());
      for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
        for (std::uint32_t t = fed[c]; t < fed[c] + e.tokens_new; ++t) {
          const auto host = rt.host_row(e.context, l, t);
          const auto want = reference.encoded_row(c, l, t);
          ASSERT_EQ(host.size(), want.size());
          ASSERT_EQ(std::memcmp(host.data(), want.data(), want.size()), 0) << "row " << t << " layer " << l;
        }
      }
      fed[c] += e.tokens_new;
      EXPECT_EQ(rt.length(e.context), fed[c]);
    }
    const char* broken = rt.check();
    EXPECT_EQ(broken, nullptr) << broken;
    // A context that reached its length: its whole history is intact on the host
    // (nothing lost when pages were reclaimed or staged), then it finishes and
    // its pages go to the others (who grow, and promote, into them).
    for (std::size_t c = 0; c < contexts.size(); ++c) {
      if (finished[c] || fed[c] < s.final_length(c)) continue;
      for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
        for (std::uint32_t t = 0; t < fed[c]; ++t) {
          const auto host = rt.host_row(contexts[c], l, t);
          ASSERT_EQ(std::memcmp(host.data(), reference.encoded_row(static_cast<std::uint32_t>(c), l, t).data(),
                                host.size()), 0);
        }
      }
      rt.finish(contexts[c]);
      finished[c] = true;
    }
    ++step;
  }
  result.counters = rt.counters();
  result.pages_total = rt.pages_total();
  EXPECT_EQ(rt.pages_free(), rt.pages_total()) << "every page returned";
  EXPECT_EQ(rt.histories_free(), rt.plan().host.history_slots) << "every history returned";
  EXPECT_EQ(rt.check(), nullptr);
  EXPECT_EQ(rt.counters().device_allocations_after_warmup, 0u);
}

// A backend by name, or nullptr when this build has none or it has no device (the caller skips).
std::unique_ptr<Backend> backend_named(const char* name, bool deterministic) {
  if (!backend_built(name)) return nullptr;
  BackendOptions options;
  options.deterministic = deterministic;
  options.seed = 1;
  options.compute_threads = 2;
  auto made = make_backend(name, options);
  return made.ok() ? std::move(made.value()) : nullptr;
}

std::unique_ptr<Backend> host_backend(bool deterministic) { return backend_named("host", deterministic); }

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct BackendParam {
  const char* name;
  bool deterministic;
};

class KvRuntimeBudgets : public ::testing::TestWithParam<BackendParam> {};

TEST_P(KvRuntimeBudgets, OutputsAreBitIdenticalAcrossBudgetsAndPoliciesWhileStagingDiffers) {
  const BackendParam param = GetParam();
  std::vector<RunResult> runs;
  struct Variant {
    double fraction;
    ResidencyPolicyKind policy;
  };
  const Variant variants[] = {{1.0, ResidencyPolicyKind::exact},  {0.25, ResidencyPolicyKind::exact},
                              {0.05, ResidencyPolicyKind::exact}, {1.0, ResidencyPolicyKind::hotness},
                              {0.25, ResidencyPolicyKind::hotness}, {0.05, ResidencyPolicyKind::hotness}};
  for (const Variant& variant : variants) {
    Scenario s;
    s.pool_fraction = variant.fraction;
    s.policy = variant.policy;
    auto backend = backend_named(param.name, param.deterministic);
    if (backend == nullptr) GTEST_SKIP() << "backend " << param.name << " is not built here or has no device";
    runs.emplace_back();
    run_scenario(s, *backend, runs.back());
    ASSERT_FALSE(HasFailure()) << "pool fraction " << variant.fraction;
    const RunResult& r = runs.back();
    std::printf("pool %.0f%% %s: pages %u, staged %llu B in %llu passes, pages resident %llu staged %llu, "
                "promotions %llu, reclaimed %llu, written back %llu B, outputs %zu\n",
                variant.fraction * 100, variant.policy == ResidencyPolicyKind::exact ? "exact" : "hotness",
                r.pages_total, static_cast<unsigned long long>(r.counters.bytes_staged),
                static_cast<unsigned long long>(r.counters.passes),
                static_cast<unsigned long long>(r.counters.pages_resident),
                static_cast<unsigned long long>(r.counters.pages_staged),
                static_cast<unsigned long long>(r.counters.promotions),
                static_cast<unsigned long long>(r.counters.pages_reclaimed),
                static_cast<unsigned long long>(r.counters.bytes_written_back), r.outputs.size());
    // The host backend allocates nothing per step either, so the count is the runtime's own.
    // An OpenCL driver (PoCL) allocates inside its enqueue calls: outside ActiveKV's control.
    if (std::string_view(param.name) == "host") {
      EXPECT_EQ(r.heap_allocations_in_steps, 0u) << "pool fraction " << variant.fraction;
      // The runtime's own count covers every step, the first included.
      EXPECT_EQ(r.counters.heap_allocations_in_steps, 0u) << "pool fraction " << variant.fraction;
    }
    EXPECT_EQ(r.counters.failed_steps, 0u);
    EXPECT_EQ(r.counters.quarantines, 0u);
  }
  for (std::size_t i = 1; i < runs.size(); ++i) {
    EXPECT_TRUE(bit_identical(runs[0].outputs, runs[i].outputs)) << "variant " << i << " differs from 100% exact";
  }
  // Staging: none when everything fits; more as the pool shrinks.
  EXPECT_EQ(runs[0].counters.bytes_staged, 0u);
  EXPECT_GT(runs[1].counters.bytes_staged, 0u);
  EXPECT_GT(runs[2].counters.bytes_staged, runs[1].counters.bytes_staged);
  EXPECT_GT(runs[2].counters.passes, runs[1].counters.passes);
  EXPECT_EQ(runs[0].counters.pages_staged, 0u);
  EXPECT_GT(runs[2].counters.pages_staged, runs[1].counters.pages_staged);
  // Write-back is the same whatever the budget: only new rows, once each.
  EXPECT_EQ(runs[0].counters.bytes_written_back, runs[2].counters.bytes_written_back);
}

INSTANTIATE_TEST_SUITE_P(Backends, KvRuntimeBudgets,
                         ::testing::Values(BackendParam{"host", false}, BackendParam{"host", true},
                                           BackendParam{"opencl", false}, BackendParam{"cuda", false}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.name) +
                                  (param_info.param.deterministic ? "_deterministic" : "");
                         });

TEST(KvRuntime, PromptsLandedWithoutAttentionServeExactDecode) {
  std::vector<RunResult> runs;
  for (const double fraction : {1.0, 0.05}) {
    auto backend = host_backend(false);
    if (backend == nullptr) GTEST_SKIP() << "the host backend is not built";
    Scenario s;
    s.pool_fraction = fraction;
    s.prefill_without_attention = true;
    runs.emplace_back();
    run_scenario(s, *backend, runs.back());
    ASSERT_FALSE(HasFailure()) << "pool fraction " << fraction;
    EXPECT_EQ(runs.back().heap_allocations_in_steps, 0u);
  }
  EXPECT_TRUE(bit_identical(runs[0].outputs, runs[1].outputs));
  EXPECT_FALSE(runs[0].outputs.empty());
  EXPECT_GT(runs[1].counters.bytes_staged, 0u);
}

TEST(KvRuntime, ExplainsWhyEachPageIsWhereItIs) {
  auto backend = host_backend(true);
  if (backend == nullptr) GTEST_SKIP() << "the host backend is not built";
  Scenario s;
  s.pool_fraction = 0.25;
  auto created = KvRuntime::create(settings_for(s), *backend);
  ASSERT_TRUE(created.ok()) << created.error().describe();
  KvRuntime& rt = *created.value();
  auto a = rt.open_context(7, 200);
  auto b = rt.open_context(8, 200);
  ASSERT_TRUE(a.ok() && b.ok());
  const Geometry g = s.geometry();
  std::vector<float> k(std::size_t{2} * s.chunk_tokens * g.kv_heads * g.head_dim, 0.5f), v(k.size(), 0.25f);
  std::vector<float> q(std::size_t{2} * s.chunk_tokens * s.q_heads * g.head_dim, 0.1f), out(q.size());
  for (int step = 0; step < 20; ++step) {
    const StepEntry entries[2] = {{a->handle, s.chunk_tokens}, {b->handle, s.chunk_tokens}};
    ASSERT_TRUE(rt.begin_step(entries).ok());
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      ASSERT_TRUE(rt.write_kv(l, k.data(), v.data()).ok());
      ASSERT_TRUE(rt.attend(l, q.data(), out.data()).ok());
    }
    ASSERT_TRUE(rt.end_step().ok());
  }
  const Explanation e = rt.explain(a->handle);
  EXPECT_EQ(e.request_id, 7u);
  EXPECT_EQ(e.length_tokens, 20 * s.chunk_tokens);
  ASSERT_FALSE(e.runs.empty());
  std::uint64_t resident = 0;
  for (const ResidentRun& run : e.runs) {
    EXPECT_STRNE(run.reason, "");
    resident += run.pages;
  }
  EXPECT_EQ(resident, e.pages_assigned);
  EXPECT_GT(e.pages_staged_per_step, 0u) << "at 25% of the pages, part of the history streams";
  EXPECT_FALSE(explanation_text(e).empty());
  rt.finish(a->handle);
  rt.finish(b->handle);
}

TEST(KvRuntime, RefusesBadSettingsNamingTheSetting) {
  auto backend = host_backend(true);
  if (backend == nullptr) GTEST_SKIP() << "the host backend is not built";
  Scenario s;
  KvRuntimeSettings settings = settings_for(s);
  settings.q_heads = 3;  // not a multiple of kv_heads = 2
  auto bad_heads = KvRuntime::create(settings, *backend);
  ASSERT_FALSE(bad_heads.ok());
  EXPECT_EQ(bad_heads.error().setting, "--q-heads");
  settings = settings_for(s);
  settings.memory.host_pool_bytes = 1024;  // not one history
  auto small_pool = KvRuntime::create(settings, *backend);
  ASSERT_FALSE(small_pool.ok());
  EXPECT_EQ(small_pool.error().setting, "--host-pool");
}

TEST(KvRuntime, RefusesAContextLongerThanMaxContextAndStaleHandles) {
  auto backend = host_backend(true);
  if (backend == nullptr) GTEST_SKIP() << "the host backend is not built";
  Scenario s;
  auto rt = KvRuntime::create(settings_for(s), *backend);
  ASSERT_TRUE(rt.ok()) << rt.error().describe();
  auto too_long = (*rt)->open_context(1, s.max_context + 1);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.error().setting, "--max-context");
  auto a = (*rt)->open_context(2, 64);
  ASSERT_TRUE(a.ok());
  const ContextId stale = a->handle;
  (*rt)->finish(stale);
  const StepEntry entry{stale, 1};
  const Status refused = (*rt)->begin_step({&entry, 1});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("not running"), std::string::npos);
}

}  // namespace
}  // namespace activekv
