// cuda_backend_test.cpp — the CUDA backend on a real GPU; skips cleanly without one.
//
// Proves, where a GPU is present: copies round-trip byte-exact (batched through
// cudaMemcpyBatchAsync where the runtime has it); a stream waiting on a fence
// (cudaStreamWaitEvent) sees the copied data; the attention kernel matches the
// double-precision CPU reference within 2e-5 absolute + 2e-5 relative and is
// bit-identical between an all-resident and a mixed pool/tile layout; a stream
// under graph capture is refused; the compute stream is never synchronised
// from the host; nothing is allocated on the step path.
// Without a GPU every test calls GTEST_SKIP with the reason.
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "activekv/backend.hpp"
#include "activekv/size.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/opencl/attention_reference.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

using namespace std::chrono_literals;
constexpr auto kWait = std::chrono::nanoseconds(30s);

MemoryRequest small_request() {
  MemoryRequest request;
  request.arena_bytes = 16 * MiB;
  request.host_pool_bytes = 16 * MiB;
  request.batch_tasks_max = 16;
  request.batch_pages_max = 1024;
  request.batch_queries_max = 64;
  request.q_heads_max = 16;
  request.head_dim_max = 128;
  request.copy_regions_max = 256;
  return request;
}

std::unique_ptr<Backend> make_or_null() {
  if (cuda::visible_devices() == 0) return nullptr;
  auto backend = make_cuda_backend(BackendOptions{});
  EXPECT_TRUE(backend.ok()) << (backend.ok() ? "" : backend.error().describe());
  if (!backend) return nullptr;
  Status allocated = (*backend)->allocate(small_request());
  EXPECT_TRUE(allocated.ok()) << (allocated.ok() ? "" : allocated.error().describe());
  if (!allocated.ok()) return nullptr;
  return std::move(backend).value();
}

#define SKIP_WITHOUT_GPU(backend)                                                                  \
  do {                                                                                             \
    if (!(backend)) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount found none)";   \
  } while (0)

FenceOutcome wait(Backend& backend, Fence fence) {
  auto outcome = backend.wait_host(fence, kWait);
  EXPECT_TRUE(outcome.ok());
  return outcome.ok() ? outcome.value() : FenceOutcome::unknown;
}

TEST(CudaBackend, WithoutAGpuTheFactorySaysSo) {
  if (cuda::visible_devices() > 0) GTEST_SKIP() << "a GPU is present";
  auto backend = make_cuda_backend(BackendOptions{});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.error().setting, "--backend");
  EXPECT_NE(backend.error().message.find("no CUDA device"), std::string::npos);
}

TEST(CudaBackend, BatchedCopiesRoundTripAndAWaitingStreamSeesTheData) {
  auto backend = make_or_null();
  SKIP_WITHOUT_GPU(backend);
  std::span<std::byte> pool = backend->host_pool();
  std::mt19937_64 rng(3);
  for (std::size_t i = 0; i < 4 * MiB; ++i) pool[i] = static_cast<std::byte>(rng());
  std::vector<CopyRegion> up, down;
  std::uint64_t offset = 0;
  for (std::uint64_t i = 0; i < 64; ++i) {
    const std::uint64_t bytes = 48 * KiB + i * 97;
    up.push_back({offset, 8 * MiB - offset - bytes, bytes});
    down.push_back({8 * MiB - offset - bytes, 8 * MiB + offset, bytes});
    offset += bytes;
  }
  auto h2d = backend->copy(CopyDirection::h2d, up);
  ASSERT_TRUE(h2d.ok()) << h2d.error().describe();
  const Fence h2d_fence = h2d.value();
  ASSERT_TRUE(backend->enqueue_wait(QueueKind::d2h, std::span(&h2d_fence, 1)).ok());
  auto d2h = backend->copy(CopyDirection::d2h, down);
  ASSERT_TRUE(d2h.ok()) << d2h.error().describe();
  EXPECT_EQ(wait(*backend, d2h.value()), FenceOutcome::signalled);
  EXPECT_EQ(std::memcmp(pool.data(), pool.data() + 8 * MiB, offset), 0);
  EXPECT_FALSE(backend->synchronize(QueueKind::compute).ok());
  EXPECT_TRUE(backend->synchronize(QueueKind::h2d).ok());
}

TEST(CudaBackend, AStreamUnderGraphCaptureIsRefused) {
  auto backend = make_or_null();
  SKIP_WITHOUT_GPU(backend);
  ASSERT_TRUE(cuda::begin_capture_for_test(*backend, QueueKind::h2d).ok());
  const CopyRegion region{0, 0, 4096};
  auto refused = backend->copy(CopyDirection::h2d, std::span(&region, 1));
  EXPECT_FALSE(refused.ok());
  if (!refused.ok()) {
    EXPECT_NE(refused.error().message.find("captured"), std::string::npos);
  }
  ASSERT_TRUE(cuda::end_capture_for_test(*backend, QueueKind::h2d).ok());
  auto accepted = backend->copy(CopyDirection::h2d, std::span(&region, 1));
  ASSERT_TRUE(accepted.ok());
  EXPECT_EQ(wait(*backend, accepted.value()), FenceOutcome::signalled);
}

TEST(CudaBackend, NeverRecordedFencesAreNotComplete) {
  auto backend = make_or_null();
  SKIP_WITHOUT_GPU(backend);
  EXPECT_EQ(backend->query(Fence{}), FenceOutcome::unknown);
  EXPECT_EQ(backend->query(Fence{3, 0}), FenceOutcome::unknown);
}

TEST(CudaBackend, AttentionMatchesTheReferenceAndIsBitIdenticalAcrossLayouts) {
  auto backend = make_or_null();
  SKIP_WITHOUT_GPU(backend);
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    AttentionShape shape{9, 3, 64, dtype, 0.125f};
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      std::mt19937_64 rng(seed);
      const std::uint32_t tokens = 1 + static_cast<std::uint32_t>(rng() % 300);
      auto layouts = gpu_testing::make_layouts(rng, shape, tokens, 16, 64);
      std::vector<std::uint32_t> positions = {tokens - 1, static_cast<std::uint32_t>(rng() % tokens)};
      std::vector<float> q(positions.size() * shape.q_heads * shape.head_dim);
      std::uniform_real_distribution<float> value(-2.0f, 2.0f);
      for (float& x : q) x = value(rng);
      std::vector<double> expected;
      gpu_testing::reference_attention(layouts.resident, shape, layouts.resident_pages, positions, q, &expected);
      std::vector<float> outputs[2], masses[2];
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
      ASSERT_EQ(std::memcmp(outputs[0].data(), outputs[1].data(), q.size() * 4), 0) << "seed " << seed;
      ASSERT_EQ(std::memcmp(masses[0].data(), masses[1].data(), masses[0].size() * 4), 0) << "seed " << seed;
      for (std::size_t i = 0; i < q.size(); ++i) {
        ASSERT_NEAR(outputs[0][i], expected[i], 2e-5 + 2e-5 * std::fabs(expected[i])) << "seed " << seed << " element " << i;
      }
    }
  }
}

TEST(CudaBackend, NoHeapAllocationOnTheStepPath) {
  auto backend = make_or_null();
  SKIP_WITHOUT_GPU(backend);
  const CopyRegion regions[2] = {{0, 0, 4096}, {8192, 8192, 4096}};
  for (int round = 0; round < 2; ++round) {
    const std::uint64_t before = testing::heap_allocations();
    auto h2d = backend->copy(CopyDirection::h2d, regions);
    ASSERT_TRUE(h2d.ok());
    auto marker = backend->record(QueueKind::d2h);
    ASSERT_TRUE(marker.ok());
    (void)backend->query(h2d.value());
    const std::uint64_t after = testing::heap_allocations();
    if (round == 1) {
      EXPECT_EQ(after, before);
    }
    for (Fence f : {h2d.value(), marker.value()}) {
      (void)backend->wait_host(f, kWait);
      backend->release_fence(f);
    }
  }
}

}  // namespace
}  // namespace activekv
