// matmul_test.cpp — every instruction-set path against the portable one, for
// every supported type, batch sizes that exercise each vector grouping (1..13),
// and row ranges that start and stop inside the matrix.
#include "engine/matmul.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/quant_blocks.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::engine {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::f32,  GgmlType::f16,  GgmlType::bf16, GgmlType::q4_0, GgmlType::q4_1,
                               GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0, GgmlType::q4_k, GgmlType::q6_k};

// Random bytes with every f16 scale field replaced by a small finite value, so
// no block decodes to inf or NaN.
std::vector<std::uint8_t> random_matrix(GgmlType type, std::uint32_t rows, std::uint32_t cols, std::mt19937& rng) {
  const std::size_t row_bytes = quant_row_bytes(type, cols);
  std::vector<std::uint8_t> bytes(rows * row_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(byte(rng));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const gguf::GgmlTypeTraits& traits = gguf::ggml_type_traits(type);
  auto put_half = [&](std::size_t offset, float value) {
    // A small positive or negative normal half: exponent 10..14, random mantissa.
    const std::uint16_t h = static_cast<std::uint16_t>((value < 0 ? 0x8000 : 0) | ((10 + byte(rng) % 5) << 10) | (byte(rng) << 2));
    std::memcpy(bytes.data() + offset, &h, 2);
  };
  const std::size_t blocks = bytes.size() / traits.block_bytes;
  for (std::size_t k = 0; k < blocks; ++k) {
    const std::size_t base = k * traits.block_bytes;
    switch (type) {
      case GgmlType::f32:
        for (std::size_t i = 0; i < traits.block_bytes; i += 4) {
          const float v = normal(rng);
          std::memcpy(bytes.data() + base + i, &v, 4);
        }
        break;
      case GgmlType::f16: put_half(base, normal(rng)); break;
      case GgmlType::bf16: {
        const float v = normal(rng);
        std::uint32_t bits;
        std::memcpy(&bits, &v, 4);
        const std::uint16_t h = static_cast<std::uint16_t>(bits >> 16);
        std::memcpy(bytes.data() + base, &h, 2);
        break;
      }
      case GgmlType::q4_0: case GgmlType::q5_0: case GgmlType::q8_0: put_half(base, normal(rng)); break;
      case GgmlType::q4_1: case GgmlType::q5_1: case GgmlType::q4_k:
        put_half(base, normal(rng));
        put_half(base + 2, normal(rng));
        break;
      case GgmlType::q6_k: put_half(base + offsetof(blocks::BlockQ6_K, d), normal(rng)); break;
      default: ADD_FAILURE() << "type not covered"; break;
    }
  }
  return bytes;
}

TEST(Matmul, EveryAvailablePathMatchesPortable) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::uint32_t rows = 37;
  for (GgmlType type : kTypes) {
    const std::uint32_t cols = gguf::ggml_type_traits(type).block_elements == 256 ? 512 : 576;
    const std::vector<std::uint8_t> bytes = random_matrix(type, rows, cols, rng);
    const MatrixView w{type, bytes.data(), cols, rows, quant_row_bytes(type, cols)};
    for (std::size_t batch : {1u, 2u, 3u, 4u, 5u, 8u, 9u, 13u}) {
      std::vector<float> x(batch * cols);
      for (float& v : x) v = normal(rng);
      std::vector<float> scratch(cols);
      std::vector<float> expected(batch * rows, -1.0f);
      matmul_rows(Isa::portable, w, x.data(), cols, batch, expected.data(), rows, 0, rows, scratch.data());
      // Σ|w·x| per output: summation-order differences scale with it, not with the result.
      std::vector<float> magnitude(batch * rows, 0.0f);
      for (std::uint32_t r = 0; r < rows; ++r) {
        dequantize_row(type, bytes.data() + r * w.row_bytes, scratch.data(), cols);
        for (std::size_t b = 0; b < batch; ++b)
          for (std::uint32_t i = 0; i < cols; ++i) magnitude[b * rows + r] += std::fabs(scratch[i] * x[b * cols + i]);
      }
      // The portable path itself against the scalar oracle.
      for (std::size_t b = 0; b < batch; ++b)
        for (std::uint32_t r = 0; r < rows; ++r)
          ASSERT_NEAR(expected[b * rows + r], dot_row_scalar(type, bytes.data() + r * w.row_bytes, x.data() + b * cols, cols),
                      1e-5f * magnitude[b * rows + r] + 1e-6f);
      for (Isa isa : {Isa::avx2, Isa::avx512}) {
        if (!isa_available(isa)) continue;
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << gguf::ggml_type_traits(type).name << " batch " << batch);
        std::vector<float> got(batch * rows, -7.0f);
        // Two row ranges, to check that only [row_begin, row_end) is written.
        matmul_rows(isa, w, x.data(), cols, batch, got.data(), rows, 0, 17, scratch.data());
        matmul_rows(isa, w, x.data(), cols, batch, got.data(), rows, 17, rows, scratch.data());
        for (std::size_t i = 0; i < got.size(); ++i) {
          // Different summation order: relative to the magnitude of the terms.
          ASSERT_NEAR(got[i], expected[i], 1e-5f * magnitude[i] + 1e-6f) << "output " << i;
        }
      }
    }
  }
}

TEST(Matmul, BestIsaIsAvailable) { EXPECT_TRUE(isa_available(best_isa())); }

TEST(Matmul, NoHeapAllocation) {
  std::mt19937 rng(3);
  const std::vector<std::uint8_t> bytes = random_matrix(GgmlType::q4_1, 8, 64, rng);
  const MatrixView w{GgmlType::q4_1, bytes.data(), 64, 8, quant_row_bytes(GgmlType::q4_1, 64)};
  std::vector<float> x(64, 1.0f), y(8), scratch(64);
  const auto before = activekv::testing::heap_allocations();
  matmul_rows(best_isa(), w, x.data(), 64, 1, y.data(), 8, 0, 8, scratch.data());
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
}

}  // namespace
}  // namespace activekv::engine
