// kv_runtime_fault_test.cpp — failed, unknown and torn work is reported, quarantined, never silently used.
//
// The deterministic host backend injects faults from a seed (failed fences,
// unknown fences, failed copies that land only a prefix) and can lose the
// device. Over many seeds the runtime drives a synthetic model with staging
// (the pool holds 25% of the pages). For every step it reports as good, the
// outputs equal the reference and the host rows equal the rows written: no
// silent wrong output. A step that touched a faulted fence reports an error,
// its contexts are marked faulted and refused until cancelled, and what the
// fence touched is quarantined (tile leases, host ranges, tail or promoted
// pages) and never comes back. After cancelling, every page that is not
// quarantined and every history is returned.
#include "activekv/kv_runtime.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "activekv/backend.hpp"
#include "backends/host/host_backend.hpp"
#include "runtime/reference_kv.hpp"

namespace activekv {
namespace {

using runtime::ReferenceKv;

constexpr float reference_tolerance = 2e-5f;

Geometry small_geometry() {
  Geometry g;
  g.dense_layers = 2;
  g.kv_heads = 2;
  g.head_dim = 16;
  g.dtype = DType::f16;
  return g;
}

KvRuntimeSettings fault_settings(std::uint32_t contexts, std::uint32_t tokens, double pool_fraction) {
  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = small_geometry();
  m.page_tokens = 4;
  m.tile_tokens = 16;
  m.tiles = 2;
  m.max_context_tokens = 256;
  m.max_seqs = contexts;
  m.chunk_tokens = 8;
  const std::uint64_t row_bytes = m.geometry.row_bytes();
  m.host_pool_bytes = std::uint64_t{contexts} * m.geometry.dense_layers * m.max_context_tokens * row_bytes;
  const std::uint64_t pages_needed = std::uint64_t{contexts} * m.geometry.dense_layers * ((tokens + 3) / 4);
  const auto pages = static_cast<std::uint64_t>(std::ceil(static_cast<double>(pages_needed) * pool_fraction));
  m.device_pool_bytes = 4 * arena_alignment_bytes + std::uint64_t{m.tiles} * m.tile_tokens * row_bytes + pages * 4 * row_bytes;
  settings.q_heads = 4;
  return settings;
}

void fill_random(std::vector<float>& v, std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  v.resize(n);
  for (auto& x : v) x = normal(rng);
}

struct FaultRun {
  std::uint64_t good_steps = 0;
  std::uint64_t failed_steps = 0;
  std::uint64_t quarantines = 0;
  std::uint64_t faults_injected = 0;
};

// Drives two contexts until a step fails or both reach `tokens`; checks every good step.
// Sparse runtimes: a decode step's outputs are compared, bit for bit, with `clean` (the same seed's
// outputs without faults: the selection depends only on the keys and the queries, and the outputs
// not on what was staged), and every output is appended to `record` when given.
void drive(KvRuntime& rt, host::HostBackend& backend, std::uint32_t tokens, std::uint64_t seed, bool lose_device_midway,
           FaultRun& run, const std::vector<float>* clean = nullptr, std::vector<float>* record = nullptr) {
  const Geometry g = small_geometry();
  const std::uint32_t q_heads = 4;
  ReferenceKv reference(g, q_heads, 4);
  std::vector<ContextId> contexts;
  for (std::uint32_t c = 0; c < 2; ++c) {
    auto admitted = rt.open_context(c + 1, tokens);
    ASSERT_TRUE(admitted.ok());
    ASSERT_EQ(admitted->outcome, AdmitOutcome::admitted);
    contexts.push_back(admitted->handle);
    reference.open();
  }
  const std::size_t kv_elems = std::size_t{g.kv_heads} * g.head_dim;
  const std::size_t q_elems = std::size_t{q_heads} * g.head_dim;
  std::mt19937_64 rng(seed);
  std::vector<float> k, v, q, expected, out(16 * q_elems);
  std::uint32_t fed = 0;
  std::uint64_t step = 0;
  std::size_t at = 0;  // into clean
  while (fed < tokens) {
    const std::uint32_t n = fed < tokens / 2 ? 8u : 1u;
    const StepEntry entries[2] = {{contexts[0], n}, {contexts[1], n}};
    ASSERT_TRUE(rt.begin_step(entries).ok());
    bool good = true;
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      if (lose_device_midway && step == 20 && l == 1) backend.lose_device();
      fill_random(k, 2 * n * kv_elems, rng);
      fill_random(v, 2 * n * kv_elems, rng);
      fill_random(q, 2 * n * q_elems, rng);
      const bool written = rt.write_kv(l, k.data(), v.data()).ok();
      const Status attended = rt.attend(l, q.data(), out.data());
      if (!written || !attended.ok()) {
        good = false;
        EXPECT_FALSE(attended.ok()) << "a failed write must fail the layer's attention too";
        EXPECT_EQ(attended.error().code, ErrorCode::backend);
        break;
      }
      const std::size_t produced = 2 * n * q_elems;
      if (record != nullptr) record->insert(record->end(), out.begin(), out.begin() + produced);
      // Sparse decode steps (the runs that record or compare): against the clean run, not the reference.
      const bool against_clean = (clean != nullptr || record != nullptr) && n == 1;
      if (clean != nullptr) {
        ASSERT_LE(at + produced, clean->size()) << "the clean run produced fewer outputs (seed " << seed << ")";
        if (n == 1) {
          ASSERT_EQ(std::memcmp(out.data(), clean->data() + at, produced * sizeof(float)), 0)
              << "a sparse step reported as good returned other outputs than without faults (seed " << seed
              << ", step " << step << ")";
        }
        at += produced;
      }
      for (std::uint32_t c = 0; c < 2; ++c) {
        reference.append(c, l, k.data() + c * n * kv_elems, v.data() + c * n * kv_elems, n);
        if (against_clean) continue;
        expected.resize(n * q_elems);
        reference.attend(c, l, q.data() + c * n * q_elems, n, fed, expected.data());
        for (std::size_t i = 0; i < n * q_elems; ++i) {
          ASSERT_NEAR(out[c * n * q_elems + i], expected[i], reference_tolerance)
              << "a step reported as good returned a wrong output (seed " << seed << ", step " << step << ")";
        }
      }
    }
    const Status ended = rt.end_step();
    if (!good || !ended.ok()) {
      EXPECT_FALSE(ended.ok()) << "the step must report the fault at its end too";
      ++run.failed_steps;
      for (const ContextId c : contexts) EXPECT_TRUE(rt.faulted(c));
      // A faulted context is refused until cancelled.
      const StepEntry again{contexts[0], 1};
      EXPECT_FALSE(rt.begin_step({&again, 1}).ok());
      break;
    }
    ++run.good_steps;
    for (std::uint32_t c = 0; c < 2; ++c) {
      for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
        for (std::uint32_t t = fed; t < fed + n; ++t) {
          const auto host = rt.host_row(contexts[c], l, t);
          ASSERT_EQ(std::memcmp(host.data(), reference.encoded_row(c, l, t).data(), host.size()), 0)
              << "a good step left a wrong row on the host (seed " << seed << ")";
        }
      }
    }
    fed += n;
    ++step;
  }
  for (const ContextId c : contexts) rt.cancel(c);
  run.quarantines = rt.counters().quarantines;
  const auto injected = backend.faults_injected();
  run.faults_injected = injected.failed_fences + injected.unknown_fences + injected.failed_copies + injected.torn_copies;
  // Every page that is not quarantined and every history that is not retired came back.
  EXPECT_EQ(rt.histories_free() + rt.histories_retired(), rt.plan().host.history_slots);
  EXPECT_EQ(rt.histories_retired(), rt.counters().histories_retired);
  EXPECT_EQ(rt.pages_free() + rt.pages_quarantined(), rt.pages_total());
  EXPECT_EQ(rt.check(), nullptr);
}

// in_place: the history below the pool is read by the kernel in place in the host pool
// (docs/IN_PLACE.md): a failed or unknown kernel fence then quarantines the host ranges it read.
void injected_faults(bool in_place) {
  const std::uint32_t tokens = 160;
  FaultRun total;
  std::uint32_t seeds_failed = 0;
  const std::uint64_t seeds = 24;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    BackendOptions options;
    options.deterministic = true;
    options.seed = seed;
    options.faults.failed_fence = 0.0002;
    options.faults.unknown_fence = 0.0001;
    options.faults.failed_copy = 0.0002;
    options.faults.late_fence = 0.05;
    host::HostBackend backend(options);
    KvRuntimeSettings settings = fault_settings(2, tokens, 0.25);
    settings.read_in_place = in_place;
    auto rt = KvRuntime::create(settings, backend);
    ASSERT_TRUE(rt.ok()) << rt.error().describe();
    FaultRun run;
    drive(**rt, backend, tokens, seed, false, run);
    if (in_place) {
      EXPECT_EQ((*rt)->counters().bytes_staged, 0u);
    }
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(run.failed_steps > 0, run.faults_injected > 0)
        << "seed " << seed << ": a step fails exactly when a fault was injected into its work";
    EXPECT_EQ((*rt)->counters().failed_steps, run.failed_steps);
    seeds_failed += run.failed_steps > 0 ? 1u : 0u;
    total.good_steps += run.good_steps;
    total.quarantines += run.quarantines;
    total.faults_injected += run.faults_injected;
  }
  // The rates are set so that most seeds see a fault and some do not.
  EXPECT_GT(seeds_failed, 0u);
  EXPECT_GT(total.quarantines, 0u);
  EXPECT_GT(total.good_steps, 0u);
  std::printf("fault seeds (%s): %u of %llu failed a step; %llu good steps; %llu quarantines; %llu faults injected\n",
              in_place ? "read in place" : "staged", seeds_failed, static_cast<unsigned long long>(seeds), static_cast<unsigned long long>(total.good_steps),
              static_cast<unsigned long long>(total.quarantines), static_cast<unsigned long long>(total.faults_injected));
}

// Sparse decode steps staging only the selected pages (predictions, misses copied in attend; or
// after the query), under the same injected faults: a step reported as good returns exactly the
// outputs of the same seed without faults, the host rows are the rows written, and a fault in
// any copy (a prediction's, a miss's) fails the step and quarantines what it touched.
TEST(KvRuntimeFaults, InjectedFaultsDuringSparseSelectiveStagingAreReportedQuarantinedAndNeverSilentlyUsed) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  const std::uint32_t tokens = 160;
  FaultRun total;
  std::uint32_t seeds_failed = 0;
  std::uint64_t missed = 0, skipped = 0;
  const std::uint64_t seeds = 24;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    KvRuntimeSettings settings = fault_settings(2, tokens, 0.25);
    settings.sparse.mode = SparseMode::pages;
    settings.sparse.pages = static_cast<std::uint32_t>(4 + seed % 3);
    settings.sparse.staging = seed % 4 == 0 ? SparseStaging::selected : SparseStaging::predicted;
    MemorySettings with_summaries = settings.memory;
    with_summaries.sparse_summaries = true;
    settings.memory.device_pool_bytes += summary_part_bytes(with_summaries);
    BackendOptions options;
    options.deterministic = true;
    options.seed = seed;
    std::vector<float> clean;
    {
      host::HostBackend quiet(options);
      auto rt = KvRuntime::create(settings, quiet);
      ASSERT_TRUE(rt.ok()) << rt.error().describe();
      FaultRun run;
      drive(**rt, quiet, tokens, seed, false, run, nullptr, &clean);
      ASSERT_EQ(run.failed_steps, 0u);
      ASSERT_GT((*rt)->sparse_stats().selections, 0u);
    }
    options.faults.failed_fence = 0.0002;
    options.faults.unknown_fence = 0.0001;
    options.faults.failed_copy = 0.0002;
    options.faults.late_fence = 0.05;
    host::HostBackend backend(options);
    auto rt = KvRuntime::create(settings, backend);
    ASSERT_TRUE(rt.ok()) << rt.error().describe();
    FaultRun run;
    drive(**rt, backend, tokens, seed, false, run, &clean);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(run.failed_steps > 0, run.faults_injected > 0)
        << "seed " << seed << ": a step fails exactly when a fault was injected into its work";
    EXPECT_EQ((*rt)->counters().failed_steps, run.failed_steps);
    seeds_failed += run.failed_steps > 0 ? 1u : 0u;
    total.good_steps += run.good_steps;
    total.quarantines += run.quarantines;
    missed += (*rt)->counters().pages_stage_missed;
    skipped += (*rt)->counters().pages_stage_skipped;
  }
  EXPECT_GT(seeds_failed, 0u);
  EXPECT_GT(total.quarantines, 0u);
  EXPECT_GT(total.good_steps, 0u);
  EXPECT_GT(missed, 0u) << "misses were copied under faults";
  EXPECT_GT(skipped, 0u) << "pages were left unstaged";
  std::printf("fault seeds (sparse, selective staging): %u of %llu failed a step; %llu good steps; %llu quarantines; "
              "%llu pages missed and copied in attend, %llu not staged\n",
              seeds_failed, static_cast<unsigned long long>(seeds), static_cast<unsigned long long>(total.good_steps),
              static_cast<unsigned long long>(total.quarantines), static_cast<unsigned long long>(missed),
              static_cast<unsigned long long>(skipped));
}

TEST(KvRuntimeFaults, InjectedFaultsAreReportedQuarantinedAndNeverSilentlyUsed) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  injected_faults(false);
}

TEST(KvRuntimeFaults, InjectedFaultsWithHistoryReadInPlaceAreReportedQuarantinedAndNeverSilentlyUsed) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  injected_faults(true);
}

TEST(KvRuntimeFaults, DeviceLossMidStepFailsTheStepAndEverythingElseDrains) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  BackendOptions options;
  options.deterministic = true;
  options.seed = 3;
  host::HostBackend backend(options);
  auto rt = KvRuntime::create(fault_settings(2, 96, 0.25), backend);
  ASSERT_TRUE(rt.ok()) << rt.error().describe();
  FaultRun run;
  drive(**rt, backend, 96, 3, true, run);
  EXPECT_EQ(run.good_steps, 20u) << "every step before the loss is good";
  EXPECT_EQ(run.failed_steps, 1u);
}

// One failed staging copy quarantines the tile it filled and the host ranges it read. The tile
// leaves the planner's rotation and the histories leave the free list, so the same runtime goes
// on: later contexts stage through the remaining tile, on the remaining histories, exactly.
TEST(KvRuntimeFaults, AFailedStagingCopyRetiresItsTileAndHistoriesAndLaterStepsStillStage) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  BackendOptions options;
  options.deterministic = true;
  options.seed = 17;
  host::HostBackend backend(options);
  auto created = KvRuntime::create(fault_settings(4, 160, 0.25), backend);
  ASSERT_TRUE(created.ok()) << created.error().describe();
  KvRuntime& rt = *created.value();

  backend.fail_next_copy(CopyDirection::h2d);  // the first staging copy
  FaultRun first;
  drive(rt, backend, 160, 1, false, first);
  if (HasFatalFailure()) return;
  ASSERT_EQ(first.failed_steps, 1u);
  EXPECT_GT(first.good_steps, 0u) << "steps before the history outgrew the pool stage nothing";
  EXPECT_GE(rt.counters().quarantines, 1u);
  const std::uint32_t retired = rt.histories_retired();
  EXPECT_GE(retired, 1u) << "the failed copy read from a history: that history is retired";
  EXPECT_LE(retired, 2u);
  EXPECT_EQ(rt.histories_free(), 4u - retired);

  const std::uint64_t staged_before = rt.counters().pages_staged;
  FaultRun second;
  drive(rt, backend, 160, 2, false, second);
  if (HasFatalFailure()) return;
  EXPECT_EQ(second.failed_steps, 0u) << "a quarantined tile or history was used again";
  EXPECT_GT(second.good_steps, 0u);
  EXPECT_GT(rt.counters().pages_staged, staged_before) << "the second run must stage to test anything";
  EXPECT_EQ(rt.counters().tiles_retired, 1u);
  EXPECT_EQ(rt.histories_retired(), retired);
}

TEST(KvRuntimeFaults, HeldCopyStallsTheStepAndNoLaterStepReusesItsBuffers) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  BackendOptions options;
  options.deterministic = true;
  options.seed = 5;
  host::HostBackend backend(options);
  auto created = KvRuntime::create(fault_settings(1, 64, 0.25), backend);
  ASSERT_TRUE(created.ok()) << created.error().describe();
  KvRuntime& rt = *created.value();
  auto a = rt.open_context(1, 64);
  ASSERT_TRUE(a.ok());
  const Geometry g = small_geometry();
  std::vector<float> k(8 * 2 * 16, 0.5f), v(k.size(), 0.25f), q(8 * 4 * 16, 0.1f), out(q.size());
  auto step = [&](std::uint32_t n) {
    const StepEntry entry{a->handle, n};
    Status s = rt.begin_step({&entry, 1});
    for (std::uint32_t l = 0; s.ok() && l < g.dense_layers; ++l) {
      s = rt.write_kv(l, k.data(), v.data());
      if (s.ok()) s = rt.attend(l, q.data(), out.data());
    }
    const Status ended = rt.end_step();
    return s.ok() ? ended : s;
  };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(step(8).ok());
  // Hold the copy engine: the rows' upload never lands, the kernel cannot run.
  ASSERT_TRUE(backend.hold_queue(QueueKind::h2d).ok());
  const Status held = step(1);
  ASSERT_FALSE(held.ok());
  EXPECT_NE(held.error().message.find("did not signal"), std::string::npos) << held.error().describe();
  EXPECT_TRUE(rt.faulted(a->handle));
  // The held work still owns the step's buffers: the runtime refuses to run another step.
  const StepEntry entry{a->handle, 1};
  const Status refused = rt.begin_step({&entry, 1});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().setting, "--fence-timeout");
  ASSERT_TRUE(backend.release_queue(QueueKind::h2d).ok());
}

}  // namespace
}  // namespace activekv
