// matmul_bench.cpp — the quantised matrix products alone (Google Benchmark):
// one Q4_1 and one Q8_0 matrix of the default model's shapes, batch 1 (decode),
// 4 (decode of four sequences; Q4_1 and Q8_0 on the 16-bit path) and 64 (prefill
// chunk), every available instruction set, one thread; the 16-bit-activation path
// (matmul_q16.hpp) for every format it reads, and its quantisation likewise; the
// 8-bit K-quant path (matmul_q8.hpp, Q4_K and Q6_K) at batch 1 and 64.
// Counters: weight bytes/s (the decode limit is memory) and GFLOP/s.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "engine/matmul.hpp"
#include "engine/matmul_q16.hpp"
#include "engine/matmul_q8.hpp"

namespace activekv::engine {
namespace {

// Byte offsets of a block's f16 scale fields: set to 1.0 so every value is finite and no fp32 product is
// subnormal (which some CPUs compute slowly).
std::vector<std::size_t> scale_offsets(GgmlType type) {
  switch (type) {
    case GgmlType::q4_1: case GgmlType::q5_1: case GgmlType::q4_k: case GgmlType::q5_k: return {0, 2};
    case GgmlType::q6_k: return {208};
    case GgmlType::q3_k: return {108};
    case GgmlType::q2_k: return {80, 82};
    default: return {0};
  }
}

// Random weight bytes for rows × row_bytes of `type`, every block's f16 factors set to 1.0 so that
// no block holds a NaN or an infinity; rng continues from the bytes for the caller's own draws.
std::vector<std::uint8_t> random_weights(GgmlType type, std::uint32_t rows, std::size_t row_bytes, std::mt19937& rng) {
  std::vector<std::uint8_t> w(rows * row_bytes);
  for (auto& b : w) b = static_cast<std::uint8_t>(rng());
  const std::size_t block_bytes = gguf::ggml_type_traits(type).block_bytes;
  for (std::size_t k = 0; k < w.size(); k += block_bytes) {
    for (const std::size_t offset : scale_offsets(type)) {
      const std::uint16_t half_one = 0x3c00;
      std::memcpy(&w[k + offset], &half_one, 2);
    }
  }
  return w;
}

void BM_matmul(benchmark::State& state, GgmlType type, Isa isa) {
  if (!isa_available(isa)) {
    state.SkipWithError("instruction set not available");
    return;
  }
  const bool k_type = gguf::ggml_type_traits(type).block_elements == 256;
  const std::uint32_t cols = k_type ? 1536 : 576, rows = k_type ? 576 : 1536;
  const std::size_t batch = static_cast<std::size_t>(state.range(0));
  const std::size_t row_bytes = quant_row_bytes(type, cols);
  std::mt19937 rng(1);
  const std::vector<std::uint8_t> w = random_weights(type, rows, row_bytes, rng);
  const MatrixView m{type, w.data(), cols, rows, row_bytes};
  std::vector<float> x(batch * cols, 0.5f), y(batch * rows), scratch(cols);
  for (auto _ : state) {
    matmul_rows(isa, m, x.data(), cols, batch, y.data(), rows, 0, rows, scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] = benchmark::Counter(static_cast<double>(w.size()) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["flop/s"] = benchmark::Counter(2.0 * cols * rows * batch * state.iterations(), benchmark::Counter::kIsRate);
}

// The 16-bit-activation path: the product alone (the activations quantised once, outside the loop) and the
// quantisation alone.
// Shapes: the default model's 576 × 1536 matrix for the 32-element types; 1536 × 576 (the same size, its
// ffn_down) for the K types, whose rows must be whole 256-element super-blocks.
void BM_matmul_q16(benchmark::State& state, GgmlType type, Isa isa) {
  if (!isa_available(isa)) {
    state.SkipWithError("instruction set not available");
    return;
  }
  const bool k_type = gguf::ggml_type_traits(type).block_elements == 256;
  const std::uint32_t cols = k_type ? 1536 : 576, rows = k_type ? 576 : 1536;
  const std::size_t batch = static_cast<std::size_t>(state.range(0));
  const std::size_t row_bytes = quant_row_bytes(type, cols);
  std::mt19937 rng(1);
  const std::vector<std::uint8_t> w = random_weights(type, rows, row_bytes, rng);
  const MatrixView m{type, w.data(), cols, rows, row_bytes};
  std::vector<float> x(batch * cols, 0.5f), y(batch * rows), scratch(cols);
  std::vector<std::int16_t> q(batch * cols);
  std::vector<float> d(batch * cols / 32), s(batch * cols / 32);
  const Q16Rows xq{q.data(), d.data(), s.data(), cols, batch};
  quantize_rows_q16(isa, x.data(), cols, xq, 0, batch);
  for (auto _ : state) {
    matmul_rows_q16(isa, m, xq, y.data(), rows, 0, rows, scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] = benchmark::Counter(static_cast<double>(w.size()) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["flop/s"] = benchmark::Counter(2.0 * cols * rows * batch * state.iterations(), benchmark::Counter::kIsRate);
}

// The 8-bit-activation K-quant path (matmul_q8.hpp): the product alone, on the random-weight benchmark file's
// ffn_up shape (2816 rows × 1024 columns); the activations quantised once, outside the loop.
void BM_matmul_q8(benchmark::State& state, GgmlType type, Isa isa) {
  if (!isa_available(isa)) {
    state.SkipWithError("instruction set not available");
    return;
  }
  const std::uint32_t cols = 1024, rows = 2816;
  const std::size_t batch = static_cast<std::size_t>(state.range(0));
  const std::size_t row_bytes = quant_row_bytes(type, cols);
  std::mt19937 rng(1);
  const std::vector<std::uint8_t> w = random_weights(type, rows, row_bytes, rng);
  const MatrixView m{type, w.data(), cols, rows, row_bytes};
  std::vector<float> x(batch * cols), y(batch * rows);
  for (auto& v : x) v = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  std::vector<std::int8_t> q(batch * cols);
  std::vector<float> d(batch * cols / q8_block);
  std::vector<std::int16_t> bsum(batch * cols / q8_group);
  const Q8Rows xq{q.data(), d.data(), bsum.data(), cols, batch};
  quantize_rows_q8(isa, x.data(), cols, xq, 0, batch);
  for (auto _ : state) {
    matmul_rows_q8(isa, m, xq, y.data(), rows, 0, rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] = benchmark::Counter(static_cast<double>(w.size()) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["flop/s"] = benchmark::Counter(2.0 * cols * rows * batch * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_quantize_q16(benchmark::State& state, Isa isa) {
  if (!isa_available(isa)) {
    state.SkipWithError("instruction set not available");
    return;
  }
  const std::uint32_t cols = 1536;
  const std::size_t batch = 64;
  std::vector<float> x(batch * cols, 0.5f);
  std::vector<std::int16_t> q(batch * cols);
  std::vector<float> d(batch * cols / 32), s(batch * cols / 32);
  const Q16Rows xq{q.data(), d.data(), s.data(), cols, batch};
  for (auto _ : state) {
    quantize_rows_q16(isa, x.data(), cols, xq, 0, batch);
    benchmark::DoNotOptimize(q.data());
  }
  state.counters["values/s"] = benchmark::Counter(static_cast<double>(batch * cols) * state.iterations(), benchmark::Counter::kIsRate);
}

// Isa::avx512 runs matmul_q16_avx512.cpp where the CPU has AVX512_VNNI, else the AVX2 kernels (q16_kernel_isa).
BENCHMARK_CAPTURE(BM_matmul_q16, q4_1_avx512, GgmlType::q4_1, Isa::avx512)->Arg(1)->Arg(4)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q8_0_avx512, GgmlType::q8_0, Isa::avx512)->Arg(1)->Arg(4)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q4_0_avx512, GgmlType::q4_0, Isa::avx512)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q5_1_avx512, GgmlType::q5_1, Isa::avx512)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q4_k_avx512, GgmlType::q4_k, Isa::avx512)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q4_1_avx2, GgmlType::q4_1, Isa::avx2)->Arg(1)->Arg(4)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q8_0_avx2, GgmlType::q8_0, Isa::avx2)->Arg(1)->Arg(4)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q4_0_avx2, GgmlType::q4_0, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q5_0_avx2, GgmlType::q5_0, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q5_1_avx2, GgmlType::q5_1, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q3_k_avx2, GgmlType::q3_k, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q4_k_avx2, GgmlType::q4_k, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q5_k_avx2, GgmlType::q5_k, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q6_k_avx2, GgmlType::q6_k, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q16, q4_k_portable, GgmlType::q4_k, Isa::portable)->Arg(1);
BENCHMARK_CAPTURE(BM_matmul_q16, q2_k_avx2, GgmlType::q2_k, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q8, q4_k_avx2, GgmlType::q4_k, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q8, q6_k_avx2, GgmlType::q6_k, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q8, q4_k_avx512, GgmlType::q4_k, Isa::avx512)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul_q8, q6_k_avx512, GgmlType::q6_k, Isa::avx512)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_quantize_q16, avx2, Isa::avx2);
BENCHMARK_CAPTURE(BM_quantize_q16, portable, Isa::portable);
BENCHMARK_CAPTURE(BM_matmul, q4_1_avx512, GgmlType::q4_1, Isa::avx512)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul, q4_1_avx2, GgmlType::q4_1, Isa::avx2)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul, q4_1_portable, GgmlType::q4_1, Isa::portable)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul, q8_0_avx512, GgmlType::q8_0, Isa::avx512)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(BM_matmul, q8_0_avx2, GgmlType::q8_0, Isa::avx2)->Arg(1)->Arg(64);

}  // namespace
}  // namespace activekv::engine

BENCHMARK_MAIN();
