// opencl_backend_test.cpp — the OpenCL backend on a real OpenCL runtime (PoCL here).
//
// What these prove, beyond the shared conformance suite:
//   - the device probe finds a device, and an out-of-range index is a clear error;
//   - copies round-trip byte-exact through the arena, in batches;
//   - a queue that waits on a fence (device-side) sees the copied data, even
//     when the copy is held back behind a user event;
//   - the attention kernel matches a double-precision CPU reference on random
//     page tables (f32, f16, bf16) within 2e-5 absolute + 2e-5 relative, and is
//     bit-identical between an all-resident layout and a mixed pool/tile one,
//     and between one call and two calls chained through load/store state;
//   - held DMA: with a d2h copy held by a user event, its fence stays pending,
//     the copy ticket on its host pages refuses release and reuse, and a canary
//     pattern proves no byte was written until the event completes;
//   - a user event completed with an error makes the gated copy's fence FAILED
//     (a negative execution status is never "complete"), and the lease and
//     ticket it touched are quarantined.
// Every test skips (with the reason) when no OpenCL device is present.
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "activekv/backend.hpp"
#include "activekv/lease.hpp"
#include "activekv/size.hpp"
#include "testing/alloc_counter.hpp"
#include "backends/opencl/attention_reference.hpp"
#include "backends/opencl/cl_device.hpp"
#include "backends/opencl/opencl_backend.hpp"

namespace activekv {
namespace {

using namespace std::chrono_literals;

constexpr auto kWait = std::chrono::nanoseconds(30s);

std::unique_ptr<Backend> make_or_skip(const MemoryRequest& request, opencl::OpenClTuning tuning = {}) {
  auto devices = opencl::list_devices();
  if (!devices || devices->empty()) return nullptr;
  BackendOptions options;
  options.fences_max = 256;
  auto backend = opencl::make_opencl_backend_tuned(options, tuning);
  EXPECT_TRUE(backend.ok()) << (backend.ok() ? "" : backend.error().describe());
  if (!backend) return nullptr;
  Status allocated = (*backend)->allocate(request);
  EXPECT_TRUE(allocated.ok()) << (allocated.ok() ? "" : allocated.error().describe());
  if (!allocated.ok()) return nullptr;
  return std::move(backend).value();
}

MemoryRequest small_request(std::uint64_t arena_bytes = 4 * MiB, std::uint64_t pool_bytes = 4 * MiB) {
  MemoryRequest request;
  request.arena_bytes = arena_bytes;
  request.host_pool_bytes = pool_bytes;
  request.batch_tasks_max = 16;
  request.batch_pages_max = 1024;
  request.batch_queries_max = 64;
  request.q_heads_max = 16;
  request.head_dim_max = 128;
  request.copy_regions_max = 64;
  return request;
}

#define SKIP_WITHOUT_DEVICE(backend)                                 \
  do {                                                               \
    if (!(backend)) GTEST_SKIP() << "no OpenCL device: " << opencl::describe_devices(); \
  } while (0)

FenceOutcome wait(Backend& backend, Fence fence) {
  auto outcome = backend.wait_host(fence, kWait);
  EXPECT_TRUE(outcome.ok());
  return outcome.ok() ? outcome.value() : FenceOutcome::unknown;
}

TEST(OpenClDevice, ProbeListsDevicesAndRefusesABadIndex) {
  auto devices = opencl::list_devices();
  ASSERT_TRUE(devices.ok()) << devices.error().describe();
  if (devices->empty()) GTEST_SKIP() << "no OpenCL device";
  for (const auto& d : *devices) {
    EXPECT_FALSE(d.device_name.empty());
    EXPECT_GT(d.max_allocation_bytes, 0u);
  }
  auto bad = opencl::choose_device("99", "--device");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().setting, "--device");
  EXPECT_NE(bad.error().message.find("out of range"), std::string::npos);
  auto none = opencl::choose_device("no-such-device-name", "--device");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("devices found"), std::string::npos);
  BackendOptions options;
  options.device_index = 99;
  auto backend = make_opencl_backend(options);
  ASSERT_FALSE(backend.ok());
}

TEST(OpenClBackend, DescribesItselfAndRefusesAnArenaLargerThanTheDeviceAllows) {
  auto devices = opencl::list_devices();
  if (!devices || devices->empty()) GTEST_SKIP() << "no OpenCL device";
  auto backend = make_opencl_backend(BackendOptions{});
  ASSERT_TRUE(backend.ok());
  EXPECT_NE((*backend)->describe().find("OpenCL"), std::string::npos);
  EXPECT_TRUE((*backend)->capabilities().can_hold_queue);
  MemoryRequest request = small_request();
  request.arena_bytes = devices->front().max_allocation_bytes + 1;
  Status status = (*backend)->allocate(request);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().setting, "--device-pool");
}

TEST(OpenClBackend, BatchedCopiesRoundTripByteExact) {
  auto backend = make_or_skip(small_request());
  SKIP_WITHOUT_DEVICE(backend);
  std::span<std::byte> pool = backend->host_pool();
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i < MiB; ++i) pool[i] = static_cast<std::byte>(rng());
  // Eight scattered regions of odd sizes: pool[0, 1 MiB) -> arena -> pool[2 MiB, 3 MiB).
  std::vector<CopyRegion> up, down, d2d;
  std::uint64_t src = 0;
  for (std::uint64_t i = 0; i < 8; ++i) {
    const std::uint64_t bytes = 48 * KiB + i * 1031;
    up.push_back({src, 3 * MiB - src - bytes, bytes});     // reversed placement in the arena
    d2d.push_back({3 * MiB - src - bytes, src, bytes});    // back to the identity placement, arena low
    down.push_back({src, 2 * MiB + src, bytes});
    src += bytes;
  }
  auto h2d = backend->copy(CopyDirection::h2d, up);
  ASSERT_TRUE(h2d.ok()) << h2d.error().describe();
  const Fence h2d_fence = h2d.value();
  auto moved = backend->copy(CopyDirection::d2d, d2d, std::span(&h2d_fence, 1));
  ASSERT_TRUE(moved.ok()) << moved.error().describe();
  const Fence moved_fence = moved.value();
  auto d2h = backend->copy(CopyDirection::d2h, down, std::span(&moved_fence, 1));
  ASSERT_TRUE(d2h.ok()) << d2h.error().describe();
  EXPECT_EQ(wait(*backend, d2h.value()), FenceOutcome::signalled);
  EXPECT_EQ(backend->query(h2d.value()), FenceOutcome::signalled);
  EXPECT_EQ(std::memcmp(pool.data(), pool.data() + 2 * MiB, src), 0);
  for (Fence f : {h2d.value(), moved.value(), d2h.value()}) backend->release_fence(f);
  EXPECT_TRUE(backend->synchronize(QueueKind::h2d).ok());
  EXPECT_FALSE(backend->synchronize(QueueKind::compute).ok());
}

TEST(OpenClBackend, AQueueWaitingOnAHeldCopySeesItsData) {
  auto backend = make_or_skip(small_request());
  SKIP_WITHOUT_DEVICE(backend);
  std::span<std::byte> pool = backend->host_pool();
  for (std::size_t i = 0; i < 64 * KiB; ++i) pool[i] = static_cast<std::byte>(i * 13 + 5);
  std::memset(pool.data() + MiB, 0, 64 * KiB);
  ASSERT_TRUE(backend->hold_queue(QueueKind::h2d).ok());
  const CopyRegion up{0, 0, 64 * KiB};
  auto h2d = backend->copy(CopyDirection::h2d, std::span(&up, 1));
  ASSERT_TRUE(h2d.ok());
  // The d2h queue waits on the device for the held copy.
  const Fence h2d_fence = h2d.value();
  ASSERT_TRUE(backend->enqueue_wait(QueueKind::d2h, std::span(&h2d_fence, 1)).ok());
  const CopyRegion down{0, MiB, 64 * KiB};
  auto d2h = backend->copy(CopyDirection::d2h, std::span(&down, 1));
  ASSERT_TRUE(d2h.ok());
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(backend->query(h2d.value()), FenceOutcome::pending);
  EXPECT_EQ(backend->query(d2h.value()), FenceOutcome::pending);
  ASSERT_TRUE(backend->release_queue(QueueKind::h2d).ok());
  EXPECT_EQ(wait(*backend, d2h.value()), FenceOutcome::signalled);
  EXPECT_EQ(std::memcmp(pool.data(), pool.data() + MiB, 64 * KiB), 0);
}

TEST(OpenClBackend, HeldDmaKeepsItsTicketAndCanary) {
  auto backend = make_or_skip(small_request());
  SKIP_WITHOUT_DEVICE(backend);
  std::span<std::byte> pool = backend->host_pool();
  constexpr std::uint64_t kBytes = 128 * KiB;
  constexpr std::uint64_t kDst = 1 * MiB;
  // Arena bytes to read back: a known pattern.
  std::vector<std::byte> pattern(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) pattern[i] = static_cast<std::byte>(i * 7 + 1);
  auto uploaded = backend->upload(0, pattern);
  ASSERT_TRUE(uploaded.ok());
  ASSERT_EQ(wait(*backend, uploaded.value()), FenceOutcome::signalled);
  // Canary around and inside the destination.
  std::memset(pool.data() + kDst - 4 * KiB, 0xA5, kBytes + 8 * KiB);

  CopyTickets tickets(*backend, 8);
  StagingLeases leases(*backend, 2);
  Ticket ticket;
  ASSERT_EQ(tickets.open(kDst, kBytes, HostAccess::write, &ticket), LeaseStatus::ok);
  Lease lease;
  ASSERT_EQ(leases.acquire(&lease), LeaseStatus::ok);

  ASSERT_TRUE(backend->hold_queue(QueueKind::d2h).ok());
  const CopyRegion down{0, kDst, kBytes};
  auto d2h = backend->copy(CopyDirection::d2h, std::span(&down, 1));
  ASSERT_TRUE(d2h.ok());
  ASSERT_EQ(tickets.attach(ticket, d2h.value()), LeaseStatus::ok);
  ASSERT_EQ(leases.copy_issued(lease, d2h.value()), LeaseStatus::ok);

  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(backend->query(d2h.value()), FenceOutcome::pending);
  EXPECT_EQ(leases.release(lease), LeaseStatus::fences_pending);
  EXPECT_EQ(tickets.close(ticket), LeaseStatus::fences_pending);
  EXPECT_TRUE(tickets.host_range_busy(kDst, kBytes));
  Ticket second;
  EXPECT_EQ(tickets.open(kDst + 4 * KiB, 4 * KiB, HostAccess::write, &second), LeaseStatus::busy);
  EXPECT_EQ(tickets.open(kDst, 4 * KiB, HostAccess::read, &second), LeaseStatus::busy);
  for (std::size_t i = 0; i < kBytes + 8 * KiB; ++i) {
    ASSERT_EQ(pool[kDst - 4 * KiB + i], std::byte{0xA5}) << "byte " << i << " overwritten while the copy was held";
  }

  ASSERT_TRUE(backend->release_queue(QueueKind::d2h).ok());
  EXPECT_EQ(wait(*backend, d2h.value()), FenceOutcome::signalled);
  EXPECT_EQ(leases.release(lease), LeaseStatus::ok);
  EXPECT_EQ(tickets.close(ticket), LeaseStatus::ok);
  EXPECT_FALSE(tickets.host_range_busy(kDst, kBytes));
  EXPECT_EQ(std::memcmp(pool.data() + kDst, pattern.data(), kBytes), 0);
  for (std::size_t i = 0; i < 4 * KiB; ++i) {
    ASSERT_EQ(pool[kDst - 4 * KiB + i], std::byte{0xA5});
    ASSERT_EQ(pool[kDst + kBytes + i], std::byte{0xA5});
  }
  backend->release_fence(d2h.value());
  backend->release_fence(uploaded.value());
}

TEST(OpenClBackend, AFailedUserEventFailsTheFenceAndQuarantines) {
  auto backend = make_or_skip(small_request());
  SKIP_WITHOUT_DEVICE(backend);
  CopyTickets tickets(*backend, 8);
  StagingLeases leases(*backend, 2);
  Ticket ticket;
  ASSERT_EQ(tickets.open(0, 64 * KiB, HostAccess::read, &ticket), LeaseStatus::ok);
  Lease lease;
  ASSERT_EQ(leases.acquire(&lease), LeaseStatus::ok);
  ASSERT_TRUE(backend->hold_queue(QueueKind::h2d).ok());
  const CopyRegion up{0, 0, 64 * KiB};
  auto h2d = backend->copy(CopyDirection::h2d, std::span(&up, 1));
  ASSERT_TRUE(h2d.ok());
  ASSERT_EQ(tickets.attach(ticket, h2d.value()), LeaseStatus::ok);
  ASSERT_EQ(leases.copy_issued(lease, h2d.value()), LeaseStatus::ok);
  ASSERT_TRUE(opencl::fail_held_queue(*backend, QueueKind::h2d).ok());
  const FenceOutcome outcome = wait(*backend, h2d.value());
  EXPECT_EQ(outcome, FenceOutcome::failed) << fence_outcome_name(outcome);
  EXPECT_EQ(leases.release(lease), LeaseStatus::quarantined);
  EXPECT_EQ(tickets.close(ticket), LeaseStatus::quarantined);
  EXPECT_EQ(leases.count(LeaseState::quarantined), 1u);
  EXPECT_TRUE(tickets.host_range_busy(0, 64 * KiB));
  EXPECT_GE(backend->stats().fences_failed, 1u);
  // The other lease still cycles: only the touched buffer is quarantined.
  Lease other;
  ASSERT_EQ(leases.acquire(&other), LeaseStatus::ok);
  EXPECT_NE(other.slot, lease.slot);
  EXPECT_EQ(leases.release(other), LeaseStatus::ok);
  backend->release_fence(h2d.value());
}

struct AttentionCase {
  DType dtype;
  std::uint32_t q_heads, kv_heads, head_dim, page_tokens, tile_tokens;
};

class OpenClAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(OpenClAttention, MatchesTheReferenceAndIsBitIdenticalAcrossLayouts) {
  const AttentionCase c = GetParam();
  auto backend = make_or_skip(small_request(8 * MiB, MiB));
  SKIP_WITHOUT_DEVICE(backend);
  AttentionShape shape{c.q_heads, c.kv_heads, c.head_dim, c.dtype, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed * 977 + c.head_dim);
    const std::uint32_t tokens = 1 + static_cast<std::uint32_t>(rng() % 200);
    gpu_testing::Layouts layouts = gpu_testing::make_layouts(rng, shape, tokens, c.page_tokens, c.tile_tokens);
    ASSERT_LE(layouts.resident.size(), 8 * MiB);
    // Queries: the last token (decode) and some earlier positions (causal prefill rows).
    std::vector<std::uint32_t> positions = {tokens - 1, static_cast<std::uint32_t>(rng() % tokens), 0};
    std::vector<float> q(positions.size() * shape.q_heads * shape.head_dim);
    std::uniform_real_distribution<float> value(-2.0f, 2.0f);
    for (float& x : q) x = value(rng);
    std::vector<double> expected;
    gpu_testing::reference_attention(layouts.resident, shape, layouts.resident_pages, positions, q, &expected);

    std::vector<float> outputs[2];
    std::vector<float> masses[2];
    for (int layout = 0; layout < 2; ++layout) {
      const auto& image = layout == 0 ? layouts.resident : layouts.mixed;
      const auto& pages = layout == 0 ? layouts.resident_pages : layouts.mixed_pages;
      auto up = backend->upload(0, image);
      ASSERT_TRUE(up.ok());
      const Fence up_fence = up.value();
      outputs[layout].assign(q.size(), -1.0f);
      masses[layout].assign(pages.size(), -1.0f);
      const AttentionTask task{0, static_cast<std::uint32_t>(pages.size()), 0, static_cast<std::uint32_t>(positions.size())};
      AttentionBatch batch;
      batch.shape = shape;
      batch.tasks = std::span(&task, 1);
      batch.pages = pages;
      batch.query_positions = positions;
      batch.queries = q;
      batch.output = outputs[layout];
      batch.page_mass = masses[layout];
      auto fence = backend->attention(batch, std::span(&up_fence, 1));
      ASSERT_TRUE(fence.ok()) << fence.error().describe();
      ASSERT_EQ(wait(*backend, fence.value()), FenceOutcome::signalled);
      backend->release_fence(fence.value());
      backend->release_fence(up_fence);
    }
    ASSERT_EQ(std::memcmp(outputs[0].data(), outputs[1].data(), q.size() * 4), 0)
        << "seed " << seed << ": outputs differ between the resident and the mixed layout";
    ASSERT_EQ(std::memcmp(masses[0].data(), masses[1].data(), masses[0].size() * 4), 0);
    for (std::size_t i = 0; i < q.size(); ++i) {
      ASSERT_NEAR(outputs[0][i], expected[i], 2e-5 + 2e-5 * std::fabs(expected[i])) << "seed " << seed << " element " << i;
    }
    // Page mass of the decode row's task: shares sum to (rows that saw ≥ 1 page) / rows = 1 here.
    double mass_total = 0.0;
    for (float m : masses[0]) {
      EXPECT_GE(m, 0.0f);
      mass_total += m;
    }
    EXPECT_NEAR(mass_total, 1.0, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpenClAttention,
                         ::testing::Values(AttentionCase{DType::f16, 9, 3, 64, 16, 64},    // smollm2
                                           AttentionCase{DType::bf16, 8, 2, 128, 8, 32},   // llama-like GQA
                                           AttentionCase{DType::f32, 4, 4, 32, 4, 16}));   // MHA, f32

TEST(OpenClAttentionState, TwoChainedCallsEqualOneCall) {
  auto backend = make_or_skip(small_request(8 * MiB, MiB));
  SKIP_WITHOUT_DEVICE(backend);
  AttentionShape shape{9, 3, 64, DType::f16, 0.125f};
  std::mt19937_64 rng(42);
  const std::uint32_t tokens = 150;
  gpu_testing::Layouts layouts = gpu_testing::make_layouts(rng, shape, tokens, 16, 64);
  auto up = backend->upload(0, layouts.mixed);
  ASSERT_TRUE(up.ok());
  ASSERT_EQ(wait(*backend, up.value()), FenceOutcome::signalled);
  const std::vector<std::uint32_t> positions = {tokens - 1};
  std::vector<float> q(shape.q_heads * shape.head_dim);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (float& x : q) x = value(rng);
  const auto pages = static_cast<std::uint32_t>(layouts.mixed_pages.size());

  std::vector<float> whole(q.size());
  AttentionTask all{0, pages, 0, 1};
  AttentionBatch one;
  one.shape = shape;
  one.tasks = std::span(&all, 1);
  one.pages = layouts.mixed_pages;
  one.query_positions = positions;
  one.queries = q;
  one.output = whole;
  auto f1 = backend->attention(one);
  ASSERT_TRUE(f1.ok());

  std::vector<float> state(shape.q_heads * (2 + shape.head_dim));
  std::vector<float> split(q.size());
  const std::uint32_t half = pages / 2;
  AttentionTask first{0, half, 0, 1};
  AttentionBatch a = one;
  a.tasks = std::span(&first, 1);
  a.output = {};
  a.write_output = false;
  a.store_state = true;
  a.state = state;
  auto f2 = backend->attention(a);
  ASSERT_TRUE(f2.ok()) << f2.error().describe();
  AttentionTask second{half, pages - half, 0, 1};
  AttentionBatch b = one;
  b.tasks = std::span(&second, 1);
  b.output = split;
  b.load_state = true;
  b.state = state;
  const Fence after = f2.value();
  auto f3 = backend->attention(b, std::span(&after, 1));
  ASSERT_TRUE(f3.ok()) << f3.error().describe();
  ASSERT_EQ(wait(*backend, f3.value()), FenceOutcome::signalled);
  ASSERT_EQ(wait(*backend, f1.value()), FenceOutcome::signalled);
  EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0);
}

TEST(OpenClAttentionState, RefusesPageMassBeyondTheScratch) {
  MemoryRequest request = small_request();
  request.batch_pages_max = 4;
  request.q_heads_max = 1;
  // The sequential schedule: its page-mass scratch is the warm-up limit. (The
  // page-parallel one keeps (m_p, s_p) in its own scratch and has no such limit.)
  auto backend = make_or_skip(request, opencl::OpenClTuning{0});
  SKIP_WITHOUT_DEVICE(backend);
  AttentionShape shape{1, 1, 16, DType::f32, 0.25f};
  std::vector<AttentionPage> pages = {{0, 0, 4}, {1024, 4, 4}, {2048, 8, 4}};
  const std::vector<std::uint32_t> positions = {11, 11};
  std::vector<float> q(2 * 16, 0.5f), out(2 * 16), mass(3);
  AttentionTask task{0, 3, 0, 2};  // 2 queries x 1 head x 3 pages = 6 > 4
  AttentionBatch batch;
  batch.shape = shape;
  batch.tasks = std::span(&task, 1);
  batch.pages = pages;
  batch.query_positions = positions;
  batch.queries = q;
  batch.output = out;
  batch.page_mass = mass;
  auto fence = backend->attention(batch);
  ASSERT_FALSE(fence.ok());
  EXPECT_EQ(fence.error().setting, "page_mass");
  batch.page_mass = {};
  fence = backend->attention(batch);
  ASSERT_TRUE(fence.ok()) << fence.error().describe();
  EXPECT_EQ(wait(*backend, fence.value()), FenceOutcome::signalled);
}

TEST(OpenClBackend, NoHeapAllocationOnTheStepPath) {
  auto backend = make_or_skip(small_request());
  SKIP_WITHOUT_DEVICE(backend);
  AttentionShape shape{2, 1, 16, DType::f32, 0.25f};
  std::vector<AttentionPage> pages = {{0, 0, 4}, {4096, 4, 4}};
  const std::vector<std::uint32_t> positions = {7};
  std::vector<float> q(2 * 16, 0.5f), out(2 * 16);
  AttentionTask task{0, 2, 0, 1};
  AttentionBatch batch;
  batch.shape = shape;
  batch.tasks = std::span(&task, 1);
  batch.pages = pages;
  batch.query_positions = positions;
  batch.queries = q;
  batch.output = out;
  const CopyRegion regions[2] = {{0, 0, 4096}, {8192, 8192, 4096}};
  // Warm the paths once (first enqueues may set up runtime state).
  for (int round = 0; round < 2; ++round) {
    const std::uint64_t before = testing::heap_allocations();
    auto h2d = backend->copy(CopyDirection::h2d, regions);
    ASSERT_TRUE(h2d.ok());
    const Fence h2d_fence = h2d.value();
    auto attention = backend->attention(batch, std::span(&h2d_fence, 1));
    ASSERT_TRUE(attention.ok());
    auto marker = backend->record(QueueKind::d2h);
    ASSERT_TRUE(marker.ok());
    (void)backend->query(attention.value());
    const std::uint64_t after = testing::heap_allocations();
    if (round == 1) {
      EXPECT_EQ(after, before) << "heap allocations on the step path (C++ operator new)";
    }
    for (Fence f : {h2d.value(), attention.value(), marker.value()}) {
      (void)backend->wait_host(f, kWait);
      backend->release_fence(f);
    }
  }
}

}  // namespace
}  // namespace activekv

namespace activekv {
namespace {

// The page-parallel schedule and the sequential one give the same bits: a batch
// of several tasks (contexts) with several query rows each, f16 and bf16,
// outputs, carried state and page mass compared bytewise.
TEST(OpenClAttentionSchedules, PageParallelEqualsSequentialBitForBit) {
  auto devices = opencl::list_devices();
  if (!devices || devices->empty()) GTEST_SKIP() << "no OpenCL device";
  std::unique_ptr<Backend> backends[2];
  for (int i = 0; i < 2; ++i) {
    opencl::OpenClTuning tuning;
    tuning.split_scratch_bytes = i == 0 ? 0 : 16 * MiB;
    auto made = opencl::make_opencl_backend_tuned(BackendOptions{}, tuning);
    ASSERT_TRUE(made.ok()) << made.error().describe();
    ASSERT_TRUE((*made)->allocate(small_request(8 * MiB, MiB)).ok());
    backends[i] = std::move(made).value();
  }
  for (DType dtype : {DType::f16, DType::bf16}) {
    const AttentionShape shape{8, 2, 64, dtype, 0.125f};
    std::mt19937_64 rng(static_cast<std::uint64_t>(dtype) + 11);
    // Three contexts side by side in one arena image: each gets its own region.
    std::vector<std::byte> image(8 * MiB);
    std::vector<AttentionPage> pages;
    std::vector<AttentionTask> tasks;
    std::vector<std::uint32_t> positions;
    std::uint64_t region = 0;
    for (std::uint32_t t = 0; t < 3; ++t) {
      const std::uint32_t tokens = 20 + static_cast<std::uint32_t>(rng() % 120);
      auto layouts = gpu_testing::make_layouts(rng, shape, tokens, 8, 32);
      ASSERT_LE(region + layouts.mixed.size(), image.size());
      std::memcpy(image.data() + region, layouts.mixed.data(), layouts.mixed.size());
      AttentionTask task{static_cast<std::uint32_t>(pages.size()), static_cast<std::uint32_t>(layouts.mixed_pages.size()),
                         static_cast<std::uint32_t>(positions.size()), 1 + t};
      for (AttentionPage page : layouts.mixed_pages) {
        page.arena_offset += region;
        pages.push_back(page);
      }
      for (std::uint32_t k = 0; k < task.query_count; ++k) positions.push_back(tokens - 1 - k * 3);
      tasks.push_back(task);
      region += (layouts.mixed.size() + 4095) / 4096 * 4096;
    }
    std::vector<float> q(positions.size() * shape.q_heads * shape.head_dim);
    std::uniform_real_distribution<float> value(-2.0f, 2.0f);
    for (float& x : q) x = value(rng);
    std::vector<float> out[2], state[2], mass[2];
    for (int i = 0; i < 2; ++i) {
      Backend& b = *backends[i];
      auto up = b.upload(0, image);
      ASSERT_TRUE(up.ok());
      const Fence up_fence = up.value();
      out[i].assign(q.size(), 0.0f);
      state[i].assign(positions.size() * shape.q_heads * (2 + shape.head_dim), 0.0f);
      mass[i].assign(pages.size(), 0.0f);
      AttentionBatch batch;
      batch.shape = shape;
      batch.tasks = tasks;
      batch.pages = pages;
      batch.query_positions = positions;
      batch.queries = q;
      batch.output = out[i];
      batch.state = state[i];
      batch.store_state = true;
      batch.page_mass = mass[i];
      auto fence = b.attention(batch, std::span(&up_fence, 1));
      ASSERT_TRUE(fence.ok()) << fence.error().describe();
      ASSERT_EQ(wait(b, fence.value()), FenceOutcome::signalled);
    }
    EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4), 0) << dtype_name(dtype);
    EXPECT_EQ(std::memcmp(state[0].data(), state[1].data(), state[0].size() * 4), 0) << dtype_name(dtype);
    EXPECT_EQ(std::memcmp(mass[0].data(), mass[1].data(), mass[0].size() * 4), 0) << dtype_name(dtype);
    // And not trivially: the outputs are finite and not all zero.
    double norm = 0.0;
    for (float x : out[0]) norm += std::fabs(x);
    EXPECT_GT(norm, 0.0);
  }
}

}  // namespace
}  // namespace activekv

namespace activekv {
namespace {

// Liveness after a fault: an attention call whose input copy failed reports
// FAILED, and the next call (which shares the scratch, so is chained on the
// device) still runs and signals with the right output.
TEST(OpenClAttentionFaults, AFailedCallDoesNotPoisonTheNext) {
  auto backend = make_or_skip(small_request());
  SKIP_WITHOUT_DEVICE(backend);
  const AttentionShape shape{2, 1, 16, DType::f32, 0.25f};
  std::vector<std::byte> rows(8 * shape.row_bytes());
  for (std::size_t i = 0; i < rows.size() / 4; ++i) {
    const float v = static_cast<float>(i % 7) * 0.25f - 0.5f;
    std::memcpy(rows.data() + i * 4, &v, 4);
  }
  const std::vector<AttentionPage> pages = {{0, 0, 4}, {4 * shape.row_bytes(), 4, 4}};
  const std::vector<std::uint32_t> positions = {7};
  std::vector<float> q(2 * 16, 0.3f), out_failed(2 * 16, -7.0f), out_good(2 * 16, -7.0f);
  const AttentionTask task{0, 2, 0, 1};
  AttentionBatch batch;
  batch.shape = shape;
  batch.tasks = std::span(&task, 1);
  batch.pages = pages;
  batch.query_positions = positions;
  batch.queries = q;

  ASSERT_TRUE(backend->hold_queue(QueueKind::h2d).ok());
  auto up = backend->upload(0, rows);
  ASSERT_TRUE(up.ok());
  const Fence up_fence = up.value();
  batch.output = out_failed;
  auto failed = backend->attention(batch, std::span(&up_fence, 1));
  ASSERT_TRUE(failed.ok());
  ASSERT_TRUE(opencl::fail_held_queue(*backend, QueueKind::h2d).ok());
  EXPECT_EQ(wait(*backend, up_fence), FenceOutcome::failed);
  EXPECT_EQ(wait(*backend, failed.value()), FenceOutcome::failed);

  auto again = backend->upload(0, rows);
  ASSERT_TRUE(again.ok());
  const Fence again_fence = again.value();
  batch.output = out_good;
  auto good = backend->attention(batch, std::span(&again_fence, 1));
  ASSERT_TRUE(good.ok()) << good.error().describe();
  EXPECT_EQ(wait(*backend, good.value()), FenceOutcome::signalled);

  std::vector<double> expected;
  gpu_testing::reference_attention(rows, shape, pages, positions, q, &expected);
  for (std::size_t i = 0; i < out_good.size(); ++i) EXPECT_NEAR(out_good[i], expected[i], 1e-5);
}

}  // namespace
}  // namespace activekv
