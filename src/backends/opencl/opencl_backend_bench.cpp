// opencl_backend_bench.cpp — what the OpenCL backend costs, on whatever device it opens.
//
//   opencl_backend_bench [--benchmark_filter=...]
//
//   BM_Memcpy/N          plain memcpy of N bytes between two host buffers (the baseline)
//   BM_CopyH2d/N         one h2d copy of N bytes from the pinned pool, enqueue to fence signalled
//   BM_CopyD2h/N         the same, device to host
//   BM_Attention/T       one decode query, smollm2 shape (9 q heads, 3 KV heads x 64, f16),
//                        T tokens in pages of 16; bytes/s = K/V bytes the kernel read
//   BM_FenceRecordQuery  record a marker on the d2h queue, query it until signalled, release
// On PoCL the "device" is the host CPU: copies are memcpy by PoCL's threads plus
// event machinery, so BM_Copy* against BM_Memcpy is the backend's overhead.
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "activekv/backend.hpp"
#include "activekv/size.hpp"

namespace {

using namespace activekv;

constexpr std::uint64_t kBytesMax = 32 * MiB;

Backend& backend() {
  static std::unique_ptr<Backend> instance = [] {
    auto made = make_opencl_backend(BackendOptions{});
    if (!made) {
      std::fprintf(stderr, "opencl_backend_bench: %s\n", made.error().describe().c_str());
      std::exit(2);
    }
    MemoryRequest request;
    request.arena_bytes = 2 * kBytesMax;
    request.host_pool_bytes = 2 * kBytesMax;
    request.batch_queries_max = 16;
    request.q_heads_max = 16;
    request.head_dim_max = 128;
    request.batch_pages_max = 4096;
    if (Status s = (*made)->allocate(request); !s.ok()) {
      std::fprintf(stderr, "opencl_backend_bench: %s\n", s.error().describe().c_str());
      std::exit(2);
    }
    std::memset((*made)->host_pool().data(), 1, 2 * kBytesMax);
    return std::move(made).value();
  }();
  return *instance;
}

void finish(benchmark::State& state, Backend& b, Result<Fence> fence) {
  if (!fence) {
    state.SkipWithError(fence.error().describe().c_str());
    return;
  }
  auto outcome = b.wait_host(fence.value(), std::chrono::seconds(30));
  if (!outcome || outcome.value() != FenceOutcome::signalled) state.SkipWithError("fence did not signal");
  b.release_fence(fence.value());
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_Copy(benchmark::State& state, CopyDirection direction) {
  Backend& b = backend();
  const auto bytes = static_cast<std::uint64_t>(state.range(0));
  const CopyRegion region{0, kBytesMax, bytes};
  for (auto _ : state) finish(state, b, b.copy(direction, std::span(&region, 1)));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
void BM_CopyH2d(benchmark::State& state) { BM_Copy(state, CopyDirection::h2d); }
void BM_CopyD2h(benchmark::State& state) {
  Backend& b = backend();
  const auto bytes = static_cast<std::uint64_t>(state.range(0));
  const CopyRegion region{kBytesMax, 0, bytes};  // arena high -> pool low
  for (auto _ : state) finish(state, b, b.copy(CopyDirection::d2h, std::span(&region, 1)));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_Attention(benchmark::State& state) {
  Backend& b = backend();
  const auto tokens = static_cast<std::uint32_t>(state.range(0));
  const AttentionShape shape{9, 3, 64, DType::f16, 0.125f};
  constexpr std::uint32_t kPage = 16;
  std::vector<AttentionPage> pages;
  for (std::uint32_t t = 0; t < tokens; t += kPage) pages.push_back({std::uint64_t{t} * shape.row_bytes(), t, kPage});
  const std::vector<std::uint32_t> positions = {tokens - 1};
  std::vector<float> q(shape.q_heads * shape.head_dim, 0.01f), out(q.size());
  const AttentionTask task{0, static_cast<std::uint32_t>(pages.size()), 0, 1};
  AttentionBatch batch;
  batch.shape = shape;
  batch.tasks = std::span(&task, 1);
  batch.pages = pages;
  batch.query_positions = positions;
  batch.queries = q;
  batch.output = out;
  for (auto _ : state) finish(state, b, b.attention(batch));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * tokens * static_cast<std::int64_t>(shape.row_bytes()));
}

void BM_FenceRecordQuery(benchmark::State& state) {
  Backend& b = backend();
  for (auto _ : state) {
    auto fence = b.record(QueueKind::d2h);
    if (!fence) {
      state.SkipWithError(fence.error().describe().c_str());
      break;
    }
    while (b.query(fence.value()) == FenceOutcome::pending) {
    }
    b.release_fence(fence.value());
  }
}

// Process CPU time (all threads: PoCL's workers included), as the host backend's
// benchmarks do: on a shared machine wall time mostly measures the neighbours.
BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(48 << 10, 32 << 20)->MeasureProcessCPUTime();
BENCHMARK(BM_CopyH2d)->RangeMultiplier(4)->Range(48 << 10, 32 << 20)->MeasureProcessCPUTime();
BENCHMARK(BM_CopyD2h)->RangeMultiplier(4)->Range(48 << 10, 32 << 20)->MeasureProcessCPUTime();
BENCHMARK(BM_Attention)->Arg(1024)->Arg(4096)->Arg(8192)->MeasureProcessCPUTime();
BENCHMARK(BM_FenceRecordQuery)->MeasureProcessCPUTime();

}  // namespace

BENCHMARK_MAIN();
