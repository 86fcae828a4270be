// matmul_q8_test.cpp — the 8-bit-activation path (matmul_q8.hpp): the AVX2
// kernels give the portable path's bits on random blocks, every output is
// independent of the batch it is computed in (every batch size 1..13 and a
// split row range), the quantisation is row-local and within half a step, the
// products are within the quantisation bound of a float64 product, the
// integer lanes do not overflow or saturate at the formats' extremes, and
// nothing is allocated.
#include "engine/matmul_q8.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "engine/quant.hpp"
#include "engine/quant_blocks.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::engine {
namespace {

constexpr GgmlType kQ8Types[] = {GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};

std::uint16_t small_half(std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  // A small positive normal half: exponent 10..14, random mantissa (d and dmin are non-negative in real files).
  return static_cast<std::uint16_t>(((10 + byte(rng) % 5) << 10) | (byte(rng) << 2));
}

// Random super-blocks whose f16 fields are small finite values.
std::vector<std::uint8_t> random_matrix(GgmlType type, std::uint32_t rows, std::uint32_t cols, std::mt19937& rng) {
  const std::size_t row_bytes = quant_row_bytes(type, cols);
  std::vector<std::uint8_t> bytes(rows * row_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(byte(rng));
  const std::size_t block_bytes = gguf::ggml_type_traits(type).block_bytes;
  for (std::size_t base = 0; base < bytes.size(); base += block_bytes) {
    const std::uint16_t d = small_half(rng), dmin = small_half(rng);
    if (type == GgmlType::q6_k) {
      std::memcpy(bytes.data() + base + offsetof(blocks::BlockQ6_K, d), &d, 2);
    } else {
      std::memcpy(bytes.data() + base, &d, 2);
      std::memcpy(bytes.data() + base + 2, &dmin, 2);
    }
  }
  return bytes;
}

// Hidden-state-like rows: normal values with a few large outliers per row.
std::vector<float> hidden_like(std::size_t batch, std::uint32_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(batch * cols);
  for (float& v : x) v = normal(rng);
  std::uniform_int_distribution<std::uint32_t> pick(0, cols - 1);
  for (std::size_t b = 0; b < batch; ++b)
    for (int i = 0; i < 3; ++i) x[b * cols + pick(rng)] = 20.0f * normal(rng);
  return x;
}

struct Q8Buffers {
  std::vector<std::int8_t> q;
  std::vector<float> d;
  std::vector<std::int16_t> bsum;
  Q8Rows rows;
  Q8Buffers(std::size_t batch, std::uint32_t cols)
      : q(batch * cols, 99), d(batch * cols / q8_block, -1.0f), bsum(batch * cols / q8_group, 9999),
        rows{q.data(), d.data(), bsum.data(), cols, batch} {}
  // Row b alone, as a one-row batch (a decode step).
  Q8Rows row(std::size_t b) {
    const std::uint32_t cols = rows.cols;
    return Q8Rows{q.data() + b * cols, d.data() + b * cols / q8_block, bsum.data() + b * cols / q8_group, cols, 1};
  }
};

TEST(MatmulQ8, QuantisationIsRowLocalWithinHalfAStepAndTheSameOnEveryPath) {
  std::mt19937 rng(5);
  const std::uint32_t cols = 768;
  const std::size_t batch = 9;
  std::vector<float> x = hidden_like(batch, cols, rng);
  for (std::uint32_t i = 256; i < 512; ++i) x[2 * cols + i] = 0.0f;  // an all-zero block
  Q8Buffers portable(batch, cols);
  quantize_rows_q8(Isa::portable, x.data(), cols, portable.rows, 0, batch);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::uint32_t k = 0; k < cols / q8_block; ++k) {
      const float d = portable.d[b * cols / q8_block + k];
      float amax = 0.0f;
      for (std::uint32_t i = k * q8_block; i < (k + 1) * q8_block; ++i) amax = std::max(amax, std::fabs(x[b * cols + i]));
      ASSERT_NEAR(d, amax / 127.0f, 1e-6f * amax);
      for (std::uint32_t g = 0; g < q8_block / q8_group; ++g) {
        int sum = 0;
        for (std::uint32_t l = 0; l < q8_group; ++l) {
          const std::size_t i = b * cols + k * q8_block + g * q8_group + l;
          ASSERT_LE(std::abs(int{portable.q[i]}), 127);
          ASSERT_LE(std::fabs(x[i] - d * portable.q[i]), 0.5f * d * (1.0f + 1e-5f) + 1e-30f) << "element " << i;
          sum += portable.q[i];
        }
        ASSERT_EQ(sum, portable.bsum[(b * cols / q8_block + k) * (q8_block / q8_group) + g]);
      }
    }
  }
  EXPECT_EQ(portable.d[2 * 3 + 1], 0.0f);
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (!isa_available(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    Q8Buffers got(batch, cols);
    quantize_rows_q8(isa, x.data(), cols, got.rows, 0, 4);  // split: the bytes depend on the row alone
    quantize_rows_q8(isa, x.data(), cols, got.rows, 4, batch);
    EXPECT_EQ(got.q, portable.q);
    EXPECT_EQ(got.bsum, portable.bsum);
    EXPECT_EQ(0, std::memcmp(got.d.data(), portable.d.data(), got.d.size() * sizeof(float)));
  }
}

TEST(MatmulQ8, EveryPathGivesThePortableBitsForEveryBatchSize) {
  std::mt19937 rng(17);
  const std::uint32_t rows = 37;
  for (GgmlType type : kQ8Types) {
    for (std::uint32_t cols : {256u, 512u, 1536u}) {
      const std::vector<std::uint8_t> bytes = random_matrix(type, rows, cols, rng);
      const MatrixView w{type, bytes.data(), cols, rows, quant_row_bytes(type, cols)};
      ASSERT_TRUE(q8_supported(type, cols));
      const std::size_t batch = 70;  // past one 64-row block of activations, and a remainder after groups of 4
      const std::vector<float> x = hidden_like(batch, cols, rng);
      Q8Buffers xq(batch, cols);
      quantize_rows_q8(Isa::portable, x.data(), cols, xq.rows, 0, batch);
      std::vector<float> expected(batch * rows, -1.0f);
      matmul_rows_q8(Isa::portable, w, xq.rows, expected.data(), rows, 0, rows);
      for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
        if (!isa_available(isa)) continue;
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << gguf::ggml_type_traits(type).name << " cols " << cols);
        // Whole batch, split row ranges (an odd one first, so the prefill kernel's tiles of 8 interleaved rows
        // shift and end in partial tiles: a wrong interleaved layout moves products between rows and fails here).
        std::vector<float> got(batch * rows, -7.0f);
        matmul_rows_q8(isa, w, xq.rows, got.data(), rows, 0, 17);
        matmul_rows_q8(isa, w, xq.rows, got.data(), rows, 17, rows);
        ASSERT_EQ(0, std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)));
        // Every batch size 1..13 (each tile shape and remainder): each row's outputs are the batch's.
        for (std::size_t n = 1; n <= 13; ++n) {
          Q8Rows first = xq.rows;
          first.batch = n;
          std::vector<float> y(n * rows, -3.0f);
          matmul_rows_q8(isa, w, first, y.data(), rows, 0, rows);
          ASSERT_EQ(0, std::memcmp(y.data(), expected.data(), y.size() * sizeof(float))) << "batch " << n;
        }
        // A row alone, from the middle and the end of the batch.
        for (std::size_t b : {std::size_t{37}, std::size_t{69}}) {
          std::vector<float> y(rows, -3.0f);
          matmul_rows_q8(isa, w, xq.row(b), y.data(), rows, 0, rows);
          ASSERT_EQ(0, std::memcmp(y.data(), expected.data() + b * rows, rows * sizeof(float))) << "row " << b;
        }
      }
    }
  }
}

// Against a float64 product with the unquantised activations (the weights
// dequantised by quant.hpp, which equals gguf.quants). Quantising a block moves
// each x by at most d/2, so |error| ≤ Σ_blocks (d/2) Σ|w| plus fp32 rounding
// (1e-5 of Σ|w·x|): the bound is derived, not fitted. The mean error must also
// be well inside it (rounding errors largely cancel).
TEST(MatmulQ8, WithinTheQuantisationBoundOfTheFloat64Product) {
  std::mt19937 rng(23);
  const std::uint32_t rows = 64, cols = 1024;
  for (GgmlType type : kQ8Types) {
    SCOPED_TRACE(gguf::ggml_type_traits(type).name);
    const std::vector<std::uint8_t> bytes = random_matrix(type, rows, cols, rng);
    const MatrixView w{type, bytes.data(), cols, rows, quant_row_bytes(type, cols)};
    const std::size_t batch = 8;
    const std::vector<float> x = hidden_like(batch, cols, rng);
    Q8Buffers xq(batch, cols);
    quantize_rows_q8(best_isa(), x.data(), cols, xq.rows, 0, batch);
    std::vector<float> y(batch * rows), wrow(cols);
    matmul_rows_q8(best_isa(), w, xq.rows, y.data(), rows, 0, rows);
    double error_sum = 0.0, bound_sum = 0.0;
    for (std::uint32_t r = 0; r < rows; ++r) {
      dequantize_row(type, bytes.data() + r * w.row_bytes, wrow.data(), cols);
      for (std::size_t b = 0; b < batch; ++b) {
        double exact = 0.0, magnitude = 0.0, bound = 0.0;
        for (std::uint32_t k = 0; k < cols / q8_block; ++k) {
          double block_w = 0.0;
          for (std::uint32_t i = k * q8_block; i < (k + 1) * q8_block; ++i) {
            exact += double{wrow[i]} * x[b * cols + i];
            magnitude += std::fabs(double{wrow[i]} * x[b * cols + i]);
            block_w += std::fabs(wrow[i]);
          }
          bound += 0.5 * xq.d[b * cols / q8_block + k] * block_w;
        }
        const double error = std::fabs(y[b * rows + r] - exact);
        ASSERT_LE(error, bound * (1.0 + 1e-4) + 1e-5 * magnitude + 1e-6) << "row " << r << " vector " << b;
        error_sum += error;
        bound_sum += bound;
      }
    }
    EXPECT_LT(error_sum, 0.1 * bound_sum);
  }
}

// The largest integer lanes each format can produce: no saturation in vpmaddubsw, no overflow in the lanes,
// and an exact conversion to fp32 (matmul_q8.hpp's bound |P_j| < 2^24).
TEST(MatmulQ8, ExtremeBlocksAreExact) {
  const std::uint32_t cols = 256;
  std::vector<float> x(cols, -3.0f);  // q = −127 everywhere, d = 3/127
  Q8Buffers xq(1, cols);
  quantize_rows_q8(Isa::portable, x.data(), cols, xq.rows, 0, 1);
  ASSERT_EQ(xq.q[0], -127);
  const float dx = xq.d[0];
  const std::uint16_t one = 0x3C00;  // 1.0 as a half
  for (GgmlType type : kQ8Types) {
    SCOPED_TRACE(gguf::ggml_type_traits(type).name);
    std::vector<std::uint8_t> bytes(quant_row_bytes(type, cols), 0);
    double per_element = 0.0;  // w × q for every element (one weight value throughout)
    if (type == GgmlType::q6_k) {
      auto& b = *reinterpret_cast<blocks::BlockQ6_K*>(bytes.data());
      // ql = qh = 0: every value is −32; scale −128: w = −128 × −32 = 4096.
      for (auto& s : b.scales) s = -128;
      b.d = one;
      per_element = 4096.0 * -127.0;
    } else {
      auto& b = *reinterpret_cast<blocks::BlockQ4_K*>(bytes.data());  // Q5_K shares the leading fields
      b.d = one;
      b.dmin = 0;
      for (auto& s : b.scales) s = 0xFF;  // every 6-bit scale and min 63
      const std::size_t qs = type == GgmlType::q4_k ? offsetof(blocks::BlockQ4_K, qs) : offsetof(blocks::BlockQ5_K, qs);
      std::memset(bytes.data() + qs, 0xFF, cols / 2);
      if (type == GgmlType::q5_k) std::memset(bytes.data() + offsetof(blocks::BlockQ5_K, qh), 0xFF, cols / 8);
      per_element = 63.0 * (type == GgmlType::q4_k ? 15.0 : 31.0) * -127.0;
    }
    const MatrixView w{type, bytes.data(), cols, 1, bytes.size()};
    const double expected = per_element * cols * static_cast<double>(dx);
    for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
      if (!isa_available(isa)) continue;
      float y = 0.0f;
      matmul_rows_q8(isa, w, xq.rows, &y, 1, 0, 1);
      EXPECT_NEAR(y, expected, 1e-6 * std::fabs(expected)) << isa_name(isa);
    }
  }
}

// The prefill kernel (several activation rows) adds vpmaddubsw pair sums in int16 before the scales apply, 8
// steps for Q4_K (≤ 8 × 2 × 15 × 127), 4 for Q5_K (≤ 4 × 2 × 31 × 127) and Q6_K (u − 32 with its sign on the
// activation: ≤ 4 × 2 × 32 × 127 = 32,512, the int16 limit's neighbourhood): at the largest values each format
// holds the sums must not wrap. Every stored bit set (Q6_K: u = 63, u − 32 = 31) and, for Q6_K, every bit clear
// (u − 32 = −32, the largest magnitude); rows of +127 and −127 alternate in a batch of 9 (two tiles of 4 and a
// remainder), against 17 weight rows (AVX2: two tiles of 8 interleaved rows and one of a single row;
// AVX-512: one of 16 and one of a single row, its int32 vpdpbusd sums far from any limit).
TEST(MatmulQ8, ExtremeBlocksAreExactInPrefillTiles) {
  const std::uint32_t cols = 512, rows = 17;
  const std::size_t batch = 9;
  std::vector<float> x(batch * cols);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::uint32_t i = 0; i < cols; ++i) x[b * cols + i] = b % 2 == 0 ? 3.0f : -3.0f;  // q = ±127
  Q8Buffers xq(batch, cols);
  quantize_rows_q8(Isa::portable, x.data(), cols, xq.rows, 0, batch);
  ASSERT_EQ(xq.q[0], 127);
  ASSERT_EQ(xq.q[cols], -127);
  const std::uint16_t one = 0x3C00;  // 1.0 as a half
  for (GgmlType type : kQ8Types) {
    for (std::uint8_t fill : {std::uint8_t{0xFF}, std::uint8_t{0x00}}) {
      if (fill == 0x00 && type != GgmlType::q6_k) continue;  // Q4_K/Q5_K: zero scales, nothing to wrap
      SCOPED_TRACE(::testing::Message() << gguf::ggml_type_traits(type).name << " fill " << int{fill});
      const std::size_t row_bytes = quant_row_bytes(type, cols);
      std::vector<std::uint8_t> bytes(rows * row_bytes, fill);
      double per_element = 0.0;  // w for every element
      for (std::size_t k = 0; k < bytes.size(); k += gguf::ggml_type_traits(type).block_bytes) {
        if (type == GgmlType::q6_k) {
          auto& b = *reinterpret_cast<blocks::BlockQ6_K*>(bytes.data() + k);
          for (auto& s : b.scales) s = -128;  // u = 63 (fill 0xFF) or 0 (0x00): w = −128 × (u − 32)
          b.d = one;
          per_element = -128.0 * (fill == 0xFF ? 31.0 : -32.0);
        } else {
          auto& b = *reinterpret_cast<blocks::BlockQ4_K*>(bytes.data() + k);  // Q5_K shares the leading fields
          b.d = one;
          b.dmin = 0;  // every 6-bit scale 63, u = 15 (Q4_K) or 31 (Q5_K)
          per_element = 63.0 * (type == GgmlType::q4_k ? 15.0 : 31.0);
        }
      }
      const MatrixView w{type, bytes.data(), cols, rows, row_bytes};
      std::vector<float> want(batch * rows), got(batch * rows);
      matmul_rows_q8(Isa::portable, w, xq.rows, want.data(), rows, 0, rows);
      for (std::size_t b = 0; b < batch; ++b) {
        const double expected = per_element * (b % 2 == 0 ? 127.0 : -127.0) * cols * static_cast<double>(xq.d[b * 2]);
        for (std::uint32_t r = 0; r < rows; ++r)
          EXPECT_NEAR(want[b * rows + r], expected, 1e-6 * std::fabs(expected)) << b;
      }
      for (Isa isa : {Isa::avx2, Isa::avx512}) {
        if (!isa_available(isa)) continue;
        matmul_rows_q8(isa, w, xq.rows, got.data(), rows, 0, rows);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << isa_name(isa);
      }
    }
  }
}

TEST(MatmulQ8, NoHeapAllocation) {
  std::mt19937 rng(3);
  const std::vector<std::uint8_t> bytes = random_matrix(GgmlType::q4_k, 8, 256, rng);
  const MatrixView w{GgmlType::q4_k, bytes.data(), 256, 8, quant_row_bytes(GgmlType::q4_k, 256)};
  std::vector<float> x(256, 1.0f), y(8);
  Q8Buffers xq(1, 256);
  const auto before = activekv::testing::heap_allocations();
  quantize_rows_q8(best_isa(), x.data(), 256, xq.rows, 0, 1);
  matmul_rows_q8(best_isa(), w, xq.rows, y.data(), 8, 0, 8);
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
}

TEST(MatmulQ8, SupportedTypesAndNames) {
  for (GgmlType type : kQ8Types) EXPECT_TRUE(q8_supported(type, 512)) << gguf::ggml_type_traits(type).name;
  EXPECT_FALSE(q8_supported(GgmlType::q4_k, 576));  // not a whole number of super-blocks
  EXPECT_TRUE(q8_supported(GgmlType::q6_k, q8_block * q8_super_blocks_max));
  EXPECT_FALSE(q8_supported(GgmlType::q6_k, q8_block * (q8_super_blocks_max + 1)));  // past the path's bound
  EXPECT_FALSE(q8_supported(GgmlType::q4_0, 512));  // the legacy formats take matmul_q8_0.hpp's 32-value blocks
  EXPECT_FALSE(q8_supported(GgmlType::q8_0, 512));
  EXPECT_FALSE(q8_supported(GgmlType::f16, 512));
  EXPECT_FALSE(q8_supported(GgmlType::q6_k, 0));
  Activations a = Activations::q16;
  EXPECT_TRUE(parse_activations("q8", &a));
  EXPECT_EQ(a, Activations::q8);
  EXPECT_TRUE(parse_activations("q16", &a));
  EXPECT_EQ(a, Activations::q16);
  EXPECT_FALSE(parse_activations("int8", &a));
  EXPECT_STREQ(activations_name(Activations::q8), "q8");
}

}  // namespace
}  // namespace activekv::engine
