// in_place_test.cpp — history read in place in the host pool (docs/IN_PLACE.md).
//
//   - outputs are bit-identical (memcmp) for device pools of 100%, 25% and 5%, read in place or
//     staged through the tiles, under the exact and the hotness policies (the hotness policy
//     promotes, which in place is a host-to-pool copy), and agree with the reference;
//   - read in place, nothing is staged: no tile copy, every non-resident page counted in place,
//     explain says so;
//   - steps after warm-up allocate nothing (heap or device);
//   - the mechanism the runtime leans on, on the host backend: a host range that a kernel reads in
//     place stays held (its read ticket cannot close, a writer is refused) until the kernel's
//     fence signalled, and the kernel reads the same bits it would from a staged copy;
//   - a backend whose kernel cannot read the host pool refuses such a page, and the runtime
//     refuses read_in_place on it.
#include "activekv/kv_runtime.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/lease.hpp"
#include "runtime/reference_kv.hpp"

namespace activekv {
namespace {

constexpr std::uint32_t kContexts = 2;
constexpr std::uint32_t kTokens = 600;   // 560 prefilled in chunks of 8, then 40 decode steps
constexpr std::uint32_t kPrefill = 560;
constexpr std::uint32_t kChunk = 8;
constexpr std::uint32_t kQHeads = 6;

Geometry geometry() {
  Geometry g;
  g.dense_layers = 3;
  g.kv_heads = 2;
  g.head_dim = 32;
  g.dtype = DType::f16;
  return g;
}

KvRuntimeSettings settings_for(double pool_fraction, bool in_place, ResidencyPolicyKind policy) {
  KvRuntimeSettings settings;
  MemorySettings& m = settings.memory;
  m.geometry = geometry();
  m.page_tokens = 8;
  m.tile_tokens = 32;  // small tiles: a long history takes several passes when staged
  m.tiles = 2;
  m.max_context_tokens = 640;
  m.max_seqs = kContexts;
  m.chunk_tokens = kChunk;
  const std::uint64_t row_bytes = m.geometry.row_bytes();
  m.host_pool_bytes = std::uint64_t{kContexts} * m.geometry.dense_layers * m.max_context_tokens * row_bytes;
  const std::uint64_t pages_needed = std::uint64_t{kContexts} * m.geometry.dense_layers * (kTokens / 8 + 1);
  const auto pages = static_cast<std::uint64_t>(std::ceil(static_cast<double>(pages_needed) * pool_fraction));
  m.device_pool_bytes = 4 * arena_alignment_bytes + std::uint64_t{m.tiles} * m.tile_tokens * row_bytes + pages * 8 * row_bytes;
  settings.q_heads = kQHeads;
  settings.policy = policy;
  settings.hotness_threshold = 0.02f;
  settings.read_in_place = in_place;
  return settings;
}

struct InPlaceRun {
  std::vector<float> outputs;  // every attend's output, in call order
  KvCounters counters;
  std::uint64_t heap_after_warm_up = 0;
  bool explain_in_place = false;
  double worst_error = 0.0;    // against the reference
};

InPlaceRun drive(double pool_fraction, bool in_place, ResidencyPolicyKind policy, bool check_reference = false) {
  InPlaceRun run;
  BackendOptions options;
  options.compute_threads = 2;
  auto backend = make_backend("host", options);
  EXPECT_TRUE(backend.ok());
  if (!backend.ok()) return run;
  auto created = KvRuntime::create(settings_for(pool_fraction, in_place, policy), **backend);
  EXPECT_TRUE(created.ok()) << created.error().describe();
  if (!created.ok()) return run;
  KvRuntime& rt = **created;
  const Geometry g = geometry();
  runtime::ReferenceKv reference(g, kQHeads, 8);
  std::vector<ContextId> contexts;
  for (std::uint32_t c = 0; c < kContexts; ++c) {
    auto admitted = rt.open_context(c + 1, 640);
    EXPECT_TRUE(admitted.ok() && admitted->outcome == AdmitOutcome::admitted);
    if (!admitted.ok()) return run;
    contexts.push_back(admitted->handle);
    reference.open();
  }
  const std::size_t kv_elems = std::size_t{g.kv_heads} * g.head_dim;
  const std::size_t q_elems = std::size_t{kQHeads} * g.head_dim;
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(kContexts * kChunk * kv_elems), v(k.size()), q(kContexts * kChunk * q_elems), out(q.size()), expected;
  std::uint32_t fed = 0;
  std::uint64_t step = 0;
  std::uint64_t heap_before = 0;
  while (fed < kTokens) {
    const std::uint32_t n = fed < kPrefill ? kChunk : 1u;
    // The second context leaves after the prefill: its pages go free, the first one grows into
    // them (promotions, which read in place are host-to-pool copies).
    if (fed == kPrefill) rt.finish(contexts[1]);
    const std::uint32_t active = fed < kPrefill ? kContexts : 1u;
    const StepEntry entries[kContexts] = {{contexts[0], n}, {contexts[1], n}};
    if (step == kPrefill / kChunk + 2) heap_before = rt.counters().heap_allocations_in_steps;  // decode steps, warmed up
    Status s = rt.begin_step({entries, active});
    EXPECT_TRUE(s.ok()) << s.error().describe();
    if (!s.ok()) return run;
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      for (std::size_t i = 0; i < active * n * kv_elems; ++i) k[i] = normal(rng), v[i] = normal(rng);
      for (std::size_t i = 0; i < active * n * q_elems; ++i) q[i] = normal(rng);
      s = rt.write_kv(l, k.data(), v.data());
      if (s.ok()) s = rt.attend(l, q.data(), out.data());
      EXPECT_TRUE(s.ok()) << s.error().describe();
      if (!s.ok()) return run;
      run.outputs.insert(run.outputs.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(active * n * q_elems));
      for (std::uint32_t c = 0; check_reference && c < active; ++c) {
        reference.append(c, l, k.data() + c * n * kv_elems, v.data() + c * n * kv_elems, n);
        expected.resize(n * q_elems);
        reference.attend(c, l, q.data() + c * n * q_elems, n, fed, expected.data());
        for (std::size_t i = 0; i < n * q_elems; ++i) {
          run.worst_error = std::max(run.worst_error, static_cast<double>(std::fabs(out[c * n * q_elems + i] - expected[i])));
        }
      }
    }
    s = rt.end_step();
    EXPECT_TRUE(s.ok()) << s.error().describe();
    if (!s.ok()) return run;
    fed += n;
    ++step;
  }
  run.counters = rt.counters();
  run.heap_after_warm_up = run.counters.heap_allocations_in_steps - heap_before;
  run.explain_in_place = rt.explain(contexts[0]).staged_in_place;
  EXPECT_EQ(rt.check(), nullptr);
  return run;
}

TEST(ReadInPlace, OutputsAreBitIdenticalForEveryBudgetReadInPlaceOrStaged) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  // The hotness policy (promotions) at 25% only: the 100% and 5% runs add nothing new there.
  const double exact_fractions[3] = {1.0, 0.25, 0.05};
  const double hotness_fractions[1] = {0.25};
  for (const ResidencyPolicyKind policy : {ResidencyPolicyKind::exact, ResidencyPolicyKind::hotness}) {
    const InPlaceRun want = drive(1.0, false, policy, true);
    ASSERT_FALSE(want.outputs.empty());
    EXPECT_LT(want.worst_error, 2e-5);
    std::uint64_t promotions_in_place = 0;
    const std::span<const double> fractions = policy == ResidencyPolicyKind::exact
                                                  ? std::span<const double>(exact_fractions)
                                                  : std::span<const double>(hotness_fractions);
    for (const double fraction : fractions) {
      for (const bool in_place : {false, true}) {
        const InPlaceRun got = drive(fraction, in_place, policy);
        if (HasFatalFailure()) return;
        ASSERT_EQ(got.outputs.size(), want.outputs.size());
        EXPECT_EQ(std::memcmp(got.outputs.data(), want.outputs.data(), want.outputs.size() * sizeof(float)), 0)
            << "pool " << fraction * 100 << "%, " << (in_place ? "read in place" : "staged") << ", policy "
            << (policy == ResidencyPolicyKind::exact ? "exact" : "hotness") << ": outputs differ from the 100% pool";
        EXPECT_EQ(got.counters.device_allocations_after_warmup, 0u);
        EXPECT_EQ(got.heap_after_warm_up, 0u) << "steps after warm-up must not allocate";
        EXPECT_EQ(got.explain_in_place, in_place);
        if (fraction < 1.0) {
          EXPECT_GT(got.counters.pages_staged, 0u) << "the pool must be short of the history to test anything";
          if (in_place) {
            EXPECT_EQ(got.counters.bytes_staged, 0u) << "read in place, nothing goes through the tiles";
            EXPECT_EQ(got.counters.pages_in_place, got.counters.pages_staged);
            EXPECT_GT(got.counters.bytes_read_in_place, 0u);
            EXPECT_EQ(got.counters.passes, 0u);
            promotions_in_place += got.counters.promotions;
          } else {
            EXPECT_GT(got.counters.bytes_staged, 0u);
            EXPECT_EQ(got.counters.pages_in_place, 0u);
            EXPECT_GT(got.counters.passes, 0u);
          }
        }
      }
    }
    if (policy == ResidencyPolicyKind::hotness) {
      EXPECT_GT(promotions_in_place, 0u) << "the hotness policy must promote read-in-place pages to test it";
    }
  }
}

// The host backend with a read ticket table, as the runtime holds them.
struct Bench {
  AttentionShape shape{4, 2, 32, DType::f16, 1.0f / std::sqrt(32.0f)};
  std::uint64_t row_bytes = shape.row_bytes();
  std::unique_ptr<Backend> backend;
  std::vector<float> q = std::vector<float>(4 * 32, 0.0f);

  explicit Bench(bool deterministic) {
    BackendOptions options;
    options.compute_threads = 2;
    options.deterministic = deterministic;
    options.reorder = false;
    auto made = make_backend("host", options);
    EXPECT_TRUE(made.ok());
    backend = std::move(made).value();
    MemoryRequest request;
    request.arena_bytes = 64 * row_bytes;
    request.host_pool_bytes = 64 * row_bytes;
    request.pin_host_pool = false;
    EXPECT_TRUE(backend->allocate(request).ok());
    std::mt19937_64 rng(9);
    std::uniform_int_distribution<int> small(-3000, 3000);
    // f16 values in about [-1, 1] in the host pool's first 32 rows; the arena holds a copy.
    std::byte* pool = backend->host_pool().data();
    for (std::uint64_t i = 0; i < 32 * row_bytes / 2; ++i) {
      const auto bits = static_cast<std::uint16_t>(0x3000 + small(rng));  // finite halves near 0.125
      std::memcpy(pool + 2 * i, &bits, 2);
    }
    std::memcpy(backend->arena_host_view().data() + 16 * row_bytes, pool, 32 * row_bytes);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
  }

  // Two pages of 16 rows: in the host pool (in place) or in the arena copy (staged).
  Result<Fence> attend(bool in_place, std::vector<float>& out) {
    AttentionPage pages[2];
    for (std::uint32_t p = 0; p < 2; ++p) {
      pages[p] = in_place ? AttentionPage{p * 16 * row_bytes, p * 16, 16, true}
                          : AttentionPage{(16 + p * 16) * row_bytes, p * 16, 16, false};
    }
    static const std::uint32_t position[1] = {40};
    const AttentionTask task{0, 2, 0, 1};
    AttentionBatch batch;
    batch.shape = shape;
    batch.tasks = {&task, 1};
    batch.pages = pages;
    batch.query_positions = position;
    batch.queries = q;
    out.assign(q.size(), 0.0f);
    batch.output = out;
    return backend->attention(batch);
  }
};

TEST(ReadInPlace, AHostRangeReadInPlaceStaysHeldUntilTheKernelFenceSignals) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  for (const bool deterministic : {false, true}) {
    Bench bench(deterministic);
    Backend& backend = *bench.backend;
    ASSERT_TRUE(backend.capabilities().kernel_reads_host_pool);
    std::vector<float> staged, in_place;
    Result<Fence> reference = bench.attend(false, staged);
    ASSERT_TRUE(reference.ok());
    ASSERT_EQ(*backend.wait_host(*reference, std::chrono::seconds(10)), FenceOutcome::signalled);
    backend.release_fence(*reference);

    CopyTickets tickets(backend, 8);
    const std::uint64_t range = 32 * bench.row_bytes;
    Ticket ticket;
    ASSERT_EQ(tickets.open(0, range, HostAccess::read, &ticket), LeaseStatus::ok);
    ASSERT_TRUE(backend.hold_queue(QueueKind::compute).ok());
    Result<Fence> kernel = bench.attend(true, in_place);
    ASSERT_TRUE(kernel.ok()) << kernel.error().describe();
    ASSERT_EQ(tickets.attach(ticket, *kernel), LeaseStatus::ok);
    backend.poll();
    EXPECT_EQ(backend.query(*kernel), FenceOutcome::pending);
    // The kernel has not run: the range it reads stays held.
    EXPECT_EQ(tickets.close(ticket), LeaseStatus::fences_pending);
    EXPECT_TRUE(tickets.host_range_busy(bench.row_bytes * 20, bench.row_bytes));
    Ticket writer;
    EXPECT_EQ(tickets.open(bench.row_bytes * 20, bench.row_bytes, HostAccess::write, &writer), LeaseStatus::busy)
        << "a write-back over a range a kernel reads in place must be refused";
    ASSERT_EQ(tickets.close_when_done(ticket), LeaseStatus::ok);
    tickets.poll();
    EXPECT_TRUE(tickets.host_range_busy(0, range)) << "closed when done, not before the kernel signalled";

    ASSERT_TRUE(backend.release_queue(QueueKind::compute).ok());
    ASSERT_EQ(*backend.wait_host(*kernel, std::chrono::seconds(10)), FenceOutcome::signalled);
    tickets.poll();
    EXPECT_FALSE(tickets.host_range_busy(0, range)) << "the kernel signalled: the range is free again";
    EXPECT_EQ(tickets.open_count(), 0u);
    EXPECT_EQ(std::memcmp(in_place.data(), staged.data(), staged.size() * sizeof(float)), 0)
        << "read in place, the kernel must give the bits it gives over a staged copy";
    backend.release_fence(*kernel);
  }
}

TEST(ReadInPlace, PagesOutsideThePoolAndBackendsThatCannotAreRefused) {
  if (!backend_built("host")) GTEST_SKIP() << "the host backend is not built";
  Bench bench(false);
  // A host-pool page past the pool's end: a clear error, nothing read.
  AttentionPage page{60 * bench.row_bytes, 0, 16, true};
  const std::uint32_t position[1] = {15};
  const AttentionTask task{0, 1, 0, 1};
  AttentionBatch batch;
  batch.shape = bench.shape;
  batch.tasks = {&task, 1};
  batch.pages = {&page, 1};
  batch.query_positions = position;
  batch.queries = bench.q;
  std::vector<float> out(bench.q.size());
  batch.output = out;
  Result<Fence> refused = bench.backend->attention(batch);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("outside the host pool"), std::string::npos) << refused.error().describe();

  // A backend whose kernel cannot read the host pool refuses such a page...
  BackendOptions options;
  options.host_pool_reads = false;
  auto made = make_backend("host", options);
  ASSERT_TRUE(made.ok());
  Backend& plain = **made;
  EXPECT_FALSE(plain.capabilities().kernel_reads_host_pool);
  MemoryRequest request;
  request.arena_bytes = 64 * bench.row_bytes;
  request.host_pool_bytes = 64 * bench.row_bytes;
  request.pin_host_pool = false;
  ASSERT_TRUE(plain.allocate(request).ok());
  page = AttentionPage{0, 0, 16, true};
  Result<Fence> cannot = plain.attention(batch);
  ASSERT_FALSE(cannot.ok());
  EXPECT_NE(cannot.error().message.find("kernel_reads_host_pool"), std::string::npos) << cannot.error().describe();
  // ...and the runtime refuses read_in_place on it.
  BackendOptions fresh_options;
  fresh_options.host_pool_reads = false;
  auto fresh = make_backend("host", fresh_options);
  ASSERT_TRUE(fresh.ok());
  Backend& plain_fresh = **fresh;
  auto created = KvRuntime::create(settings_for(0.25, true, ResidencyPolicyKind::exact), plain_fresh);
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.error().setting, "read_in_place") << created.error().describe();
}

}  // namespace
}  // namespace activekv
