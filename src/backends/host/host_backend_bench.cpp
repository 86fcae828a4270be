// host_backend_bench.cpp — what the host backend costs, against the machine's own memcpy.
//
//   copy/<bytes>          one h2d copy through the h2d worker, waited on the host
//   memcpy/<bytes>        plain memcpy of the same bytes, same run
//   copy_batched/<n>      n regions of 48 KiB in one batched call (one fence)
//   attention/...         decode attention (1 query) over a context's pages:
//                         bytes/s counts the K/V bytes the kernel read
//   memcpy_kv/<bytes>     memcpy of as many bytes as the attention reads
//   ..._30_layers         the same over 30 layers' worth of bytes (past the caches), wall time
//   fence_roundtrip       record a marker, query it, wait for it, release it (threaded)
//   fence_bookkeeping     record + query + complete + release on the virtual clock
//                         (no threads: the table and queue cost alone)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/host/host_backend.hpp"

namespace activekv::host {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<HostBackend> make(std::uint64_t arena, std::uint64_t pool, std::uint32_t threads, bool deterministic = false) {
  BackendOptions options;
  options.compute_threads = threads;
  options.deterministic = deterministic;
  auto backend = std::make_unique<HostBackend>(options);
  MemoryRequest request;
  request.arena_bytes = arena;
  request.host_pool_bytes = pool;
  request.pin_host_pool = false;  // the benchmark measures copies, not the memlock limit
  request.batch_pages_max = 8192;
  request.batch_queries_max = 256;
  request.q_heads_max = 32;
  request.head_dim_max = 128;
  request.copy_regions_max = 1024;
  const Status status = backend->allocate(request);
  if (!status.ok()) std::abort();
  return backend;
}

void copy(benchmark::State& state) {
  const auto bytes = static_cast<std::uint64_t>(state.range(0));
  auto backend = make(bytes, bytes, 1);
  std::memset(backend->host_pool().data(), 1, bytes);
  const CopyRegion region{0, 0, bytes};
  for (auto _ : state) {
    const Fence fence = backend->copy(CopyDirection::h2d, std::span<const CopyRegion>(&region, 1)).value();
    benchmark::DoNotOptimize(backend->wait_host(fence, 10s).value());
    backend->release_fence(fence);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void plain_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void copy_batched(benchmark::State& state) {
  const auto regions = static_cast<std::uint32_t>(state.range(0));
  constexpr std::uint64_t region_bytes = 48 * 1024;
  const std::uint64_t bytes = regions * region_bytes;
  auto backend = make(2 * bytes, 2 * bytes, 1);
  std::vector<CopyRegion> list;
  for (std::uint32_t i = 0; i < regions; ++i) list.push_back({2 * i * region_bytes, (2 * (regions - 1 - i) + 1) * region_bytes, region_bytes});
  for (auto _ : state) {
    const Fence fence = backend->copy(CopyDirection::h2d, list).value();
    benchmark::DoNotOptimize(backend->wait_host(fence, 10s).value());
    backend->release_fence(fence);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

// Decode attention: 1 query at the last position over `tokens` tokens of one
// layer; with a third argument L, L layers' contexts in turn (each call the
// next layer's pages, as a decode step walks its layers): past the caches.
void attention(benchmark::State& state, std::uint32_t kv_heads, std::uint32_t q_heads, std::uint32_t head_dim, DType dtype) {
  const auto tokens = static_cast<std::uint32_t>(state.range(0));
  const auto threads = static_cast<std::uint32_t>(state.range(1));
  const auto layers = state.range(2) > 0 ? static_cast<std::uint32_t>(state.range(2)) : 1u;
  constexpr std::uint32_t page_tokens = 16;
  AttentionShape shape{q_heads, kv_heads, head_dim, dtype, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  const std::uint64_t bytes = std::uint64_t{tokens} * shape.row_bytes();
  auto backend = make(bytes * layers, 4096, threads);
  std::mt19937 rng(1);
  std::byte* arena = backend->arena_host_view().data();
  std::uint32_t lcg = 1;
  for (std::uint64_t i = 0; i < bytes * layers; i += 2) {
    lcg = lcg * 1664525u + 1013904223u;
    // f16: 0.125 .. 1; bf16: small normal values. No subnormals either way.
    const auto h = static_cast<std::uint16_t>(0x3000 + (lcg >> 16) % 0x0c00);
    std::memcpy(arena + i, &h, 2);
  }
  const std::uint32_t pages = tokens / page_tokens;
  std::vector<std::vector<AttentionPage>> tables(layers, std::vector<AttentionPage>(pages));
  for (std::uint32_t l = 0; l < layers; ++l) {
    // Pages scattered through the arena (a shuffled pool), as the core would place them.
    std::vector<std::uint32_t> slots(pages);
    for (std::uint32_t i = 0; i < pages; ++i) slots[i] = i;
    std::shuffle(slots.begin(), slots.end(), rng);
    for (std::uint32_t k = 0; k < pages; ++k)
      tables[l][k] = {l * bytes + slots[k] * page_tokens * shape.row_bytes(), k * page_tokens, page_tokens};
  }
  std::vector<float> q(std::size_t{q_heads} * head_dim, 0.01f), out(q.size());
  const std::uint32_t position = tokens - 1;
  const AttentionTask task{0, pages, 0, 1};
  AttentionBatch batch;
  batch.shape = shape;
  batch.tasks = std::span<const AttentionTask>(&task, 1);
  batch.query_positions = std::span<const std::uint32_t>(&position, 1);
  batch.queries = q;
  batch.output = out;
  std::uint32_t layer = 0;
  for (auto _ : state) {
    batch.pages = tables[layer];
    layer = layer + 1 == layers ? 0 : layer + 1;
    const Fence fence = backend->attention(batch).value();
    benchmark::DoNotOptimize(backend->wait_host(fence, 10s).value());
    backend->release_fence(fence);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["kv_bytes"] = static_cast<double>(bytes);
}

void attention_smollm2(benchmark::State& state) { attention(state, 3, 9, 64, DType::f16); }

// A prefill chunk's attention: the last `queries` positions of a `tokens`-token context (the last
// page may be partial) over one layer's pages, SmolLM2's shape: a follow-up's suffix step (37
// queries after 704 tokens) against a prefill chunk (256 queries). items/s counts query rows.
void attention_chunk(benchmark::State& state) {
  const auto tokens = static_cast<std::uint32_t>(state.range(0));
  const auto queries = static_cast<std::uint32_t>(state.range(1));
  const auto threads = static_cast<std::uint32_t>(state.range(2));
  constexpr std::uint32_t page_tokens = 16, q_heads = 9, kv_heads = 3, head_dim = 64;
  AttentionShape shape{q_heads, kv_heads, head_dim, DType::f16, 1.0f / std::sqrt(static_cast<float>(head_dim))};
  const std::uint32_t pages = (tokens + page_tokens - 1) / page_tokens;
  const std::uint64_t bytes = std::uint64_t{pages} * page_tokens * shape.row_bytes();
  auto backend = make(bytes, 4096, threads);
  std::byte* arena = backend->arena_host_view().data();
  std::uint32_t lcg = 1;
  for (std::uint64_t i = 0; i < bytes; i += 2) {
    lcg = lcg * 1664525u + 1013904223u;
    const auto h = static_cast<std::uint16_t>(0x3000 + (lcg >> 16) % 0x0c00);
    std::memcpy(arena + i, &h, 2);
  }
  std::vector<AttentionPage> table(pages);
  for (std::uint32_t k = 0; k < pages; ++k)
    table[k] = {std::uint64_t{k} * page_tokens * shape.row_bytes(), k * page_tokens, std::min(page_tokens, tokens - k * page_tokens)};
  std::vector<float> q(std::size_t{queries} * q_heads * head_dim), out(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * static_cast<float>(i % 17);
  std::vector<std::uint32_t> positions(queries);
  for (std::uint32_t i = 0; i < queries; ++i) positions[i] = tokens - queries + i;
  const AttentionTask task{0, pages, 0, queries};
  AttentionBatch batch;
  batch.shape = shape;
  batch.tasks = std::span<const AttentionTask>(&task, 1);
  batch.pages = table;
  batch.query_positions = positions;
  batch.queries = q;
  batch.output = out;
  for (auto _ : state) {
    const Fence fence = backend->attention(batch).value();
    benchmark::DoNotOptimize(backend->wait_host(fence, 10s).value());
    backend->release_fence(fence);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * queries));
}
void attention_llama8b(benchmark::State& state) { attention(state, 8, 32, 128, DType::bf16); }

void fence_roundtrip(benchmark::State& state) {
  auto backend = make(4096, 4096, 1);
  for (auto _ : state) {
    const Fence fence = backend->record(QueueKind::d2h).value();
    benchmark::DoNotOptimize(backend->query(fence));
    benchmark::DoNotOptimize(backend->wait_host(fence, 10s).value());
    backend->release_fence(fence);
  }
}

void fence_bookkeeping(benchmark::State& state) {
  auto backend = make(4096, 4096, 1, true);
  for (auto _ : state) {
    const Fence fence = backend->record(QueueKind::d2h).value();
    benchmark::DoNotOptimize(backend->query(fence));
    backend->advance(1000);
    benchmark::DoNotOptimize(backend->query(fence));
    backend->release_fence(fence);
  }
}

// The machine is shared: "Time" is wall time, "CPU" is the whole process's CPU
// time (every thread), and bytes_per_second is computed on the CPU time, which
// is what other builds running at the same time disturb least.
BENCHMARK(copy)->Arg(48 << 10)->Arg(256 << 10)->Arg(1 << 20)->Arg(4 << 20)->Arg(32 << 20)->MeasureProcessCPUTime();
BENCHMARK(plain_memcpy)->Arg(48 << 10)->Arg(256 << 10)->Arg(1 << 20)->Arg(4 << 20)->Arg(32 << 20)->MeasureProcessCPUTime();
BENCHMARK(copy_batched)->Arg(16)->Arg(256)->MeasureProcessCPUTime();
BENCHMARK(attention_smollm2)->Args({2048, 1, 1})->Args({8192, 1, 1})->Args({8192, 2, 1})->MeasureProcessCPUTime();
// 30 layers of 8K (180 MiB): the kernel streaming from memory, as in a decode step; wall time for the 2-thread split.
BENCHMARK(attention_smollm2)->Name("attention_smollm2_30_layers")->Args({8192, 1, 30})->Args({8192, 2, 30})->MeasureProcessCPUTime()->UseRealTime();
// The follow-up's suffix (37 queries after 704 tokens) and the last prefill chunk of the same prompt.
BENCHMARK(attention_chunk)->Args({741, 37, 1})->Args({741, 37, 2})->Args({741, 229, 1})->Args({741, 229, 2})->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK(attention_llama8b)->Args({8192, 1, 1})->Args({8192, 2, 1})->MeasureProcessCPUTime();
BENCHMARK(plain_memcpy)->Name("memcpy_kv")->Arg(8192 * 768)->Arg(8192 * 4096)->MeasureProcessCPUTime();
// memcpy of a 180 MiB buffer (what 30 layers of 8K context hold): the machine's streaming rate, same run.
BENCHMARK(plain_memcpy)->Name("memcpy_kv_30_layers")->Arg(30 * 8192 * 768)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK(fence_roundtrip)->MeasureProcessCPUTime();
BENCHMARK(fence_bookkeeping)->MeasureProcessCPUTime();

}  // namespace
}  // namespace activekv::host

BENCHMARK_MAIN();
