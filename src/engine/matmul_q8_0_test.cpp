// matmul_q8_0_test.cpp — the legacy formats' 8-bit-activation path
// (matmul_q8_0.hpp): the f16 rounding is to nearest even; the quantisation and
// every kernel equal a straightforward scalar reference of the stated
// arithmetic written here from the block layouts (exact equality: integer dots
// and the same fp32 order); the AVX2 kernels give the portable bits for every
// batch size and row split; the products are within a derived bound of a
// float64 product; the formats' extreme blocks are exact; nothing is allocated.
#include "engine/matmul_q8_0.hpp"

#include <gtest/gtest.h>

#include <algorithm>
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

using blocks::float_to_half;
using blocks::half_to_float;

constexpr GgmlType kLegacyTypes[] = {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0};

bool has_min(GgmlType type) { return type == GgmlType::q4_1 || type == GgmlType::q5_1; }

std::uint16_t small_half(std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  // A small normal half of either sign: exponent 8..14, random mantissa.
  return static_cast<std::uint16_t>(((byte(rng) & 1) << 15) | ((8 + byte(rng) % 7) << 10) | (byte(rng) << 2));
}

// Random blocks whose f16 fields (d, and m where the format has it) are small finite values.
std::vector<std::uint8_t> random_matrix(GgmlType type, std::uint32_t rows, std::uint32_t cols, std::mt19937& rng) {
  std::vector<std::uint8_t> bytes(rows * quant_row_bytes(type, cols));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(byte(rng));
  const std::size_t block_bytes = gguf::ggml_type_traits(type).block_bytes;
  for (std::size_t base = 0; base < bytes.size(); base += block_bytes) {
    const std::uint16_t d = small_half(rng), m = small_half(rng);
    std::memcpy(bytes.data() + base, &d, 2);
    if (has_min(type)) std::memcpy(bytes.data() + base + 2, &m, 2);
  }
  return bytes;
}

// Hidden-state-like rows: normal values with a few large outliers per row, and one row of small values
// (whose block scales are f16 subnormals).
std::vector<float> hidden_like(std::size_t batch, std::uint32_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(batch * cols);
  for (float& v : x) v = normal(rng);
  std::uniform_int_distribution<std::uint32_t> pick(0, cols - 1);
  for (std::size_t b = 0; b < batch; ++b)
    for (int i = 0; i < 3; ++i) x[b * cols + pick(rng)] = 20.0f * normal(rng);
  if (batch > 1)
    for (std::uint32_t i = 0; i < cols; ++i) x[cols + i] *= 1e-4f;
  return x;
}

struct Buffers {
  std::vector<std::int8_t> q;
  std::vector<float> d, s;
  Q8_0Rows rows;
  Buffers(std::size_t batch, std::uint32_t cols)
      : q(batch * cols, 99), d(batch * cols / q8_0_block, -1.0f), s(batch * cols / q8_0_block, -1.0f),
        rows{q.data(), d.data(), s.data(), cols, batch} {}
  Q8_0Rows row(std::size_t b) {
    const std::uint32_t cols = rows.cols, nb = cols / q8_0_block;
    return Q8_0Rows{q.data() + b * cols, d.data() + b * nb, s.data() + b * nb, cols, 1};
  }
};

// --- the scalar reference, from the block layouts (quant_blocks.hpp) ---

// Block k's f16 factors and 32 integers u, element order.
void reference_block(GgmlType type, const std::uint8_t* row, std::size_t k, float* dw, float* mw, int* u) {
  const std::size_t block_bytes = gguf::ggml_type_traits(type).block_bytes;
  const std::uint8_t* p = row + k * block_bytes;
  std::uint16_t d = 0, m = 0;
  std::memcpy(&d, p, 2);
  *dw = half_to_float(d);
  *mw = 0.0f;
  if (type == GgmlType::q8_0) {
    for (int e = 0; e < 32; ++e) u[e] = static_cast<std::int8_t>(p[2 + e]);
    return;
  }
  if (has_min(type)) {
    std::memcpy(&m, p + 2, 2);
    *mw = half_to_float(m);
  }
  const bool five = type == GgmlType::q5_0 || type == GgmlType::q5_1;
  const std::size_t qh_at = has_min(type) ? 4 : 2;
  const std::uint8_t* qs = p + qh_at + (five ? 4 : 0);
  std::uint32_t qh = 0;
  if (five) std::memcpy(&qh, p + qh_at, 4);
  const int offset = has_min(type) ? 0 : (five ? 16 : 8);
  for (int e = 0; e < 32; ++e) {
    const int nibble = e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4);
    const int high = five ? static_cast<int>((qh >> e) & 1u) << 4 : 0;
    u[e] = (nibble | high) - offset;
  }
}

void reference_quantize(const float* x, std::uint32_t cols, std::int8_t* q, float* d, float* s) {
  for (std::uint32_t k = 0; k < cols / 32; ++k) {
    float amax = 0.0f;
    for (std::uint32_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * k + i]));
    const float d32 = amax / 127.0f;
    const float is = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (std::uint32_t i = 0; i < 32; ++i) {
      q[32 * k + i] = static_cast<std::int8_t>(std::nearbyint(x[32 * k + i] * is));
      sum += q[32 * k + i];
    }
    d[k] = half_to_float(float_to_half(d32));
    s[k] = half_to_float(float_to_half(d32 * static_cast<float>(sum)));
  }
}

float reference_dot(GgmlType type, const std::uint8_t* row, std::uint32_t cols, const std::int8_t* q, const float* d,
                    const float* s) {
  float acc[8] = {};
  float mins = 0.0f;
  for (std::uint32_t k = 0; k < cols / 32; ++k) {
    float dw = 0.0f, mw = 0.0f;
    int u[32];
    reference_block(type, row, k, &dw, &mw, u);
    for (int j = 0; j < 8; ++j) {
      int lane = 0;
      for (int e = 4 * j; e < 4 * j + 4; ++e) lane += u[e] * q[32 * k + e];
      acc[j] = std::fma(static_cast<float>(lane), dw * d[k], acc[j]);
    }
    const float m = mw * s[k];
    mins = mins + m;
  }
  const float y = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
  return has_min(type) ? y + mins : y;
}

TEST(MatmulQ8_0, FloatToHalfRoundsToNearestEven) {
  // Every finite positive half h: itself, and the midpoint to h + 1 (ties to the even one) and its neighbours.
  for (std::uint32_t h = 0; h < 0x7bff; ++h) {
    const float a = half_to_float(static_cast<std::uint16_t>(h)), b = half_to_float(static_cast<std::uint16_t>(h + 1));
    ASSERT_EQ(float_to_half(a), h);
    ASSERT_EQ(float_to_half(-a), h | 0x8000u);
    const float mid = 0.5f * (a + b);  // exact: a half has 11 significant bits
    ASSERT_EQ(float_to_half(mid), (h & 1u) ? h + 1 : h) << "h " << h;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 0.0f)), h) << "h " << h;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 1e9f)), h + 1) << "h " << h;
  }
  EXPECT_EQ(float_to_half(65504.0f), 0x7bffu);
  EXPECT_EQ(float_to_half(65519.99f), 0x7bffu);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00u);  // the tie above the largest half goes to infinity
  EXPECT_EQ(float_to_half(1e30f), 0x7c00u);
  EXPECT_EQ(float_to_half(-INFINITY), 0xfc00u);
  EXPECT_EQ(float_to_half(1e-30f), 0u);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0u);  // half the smallest subnormal: a tie, to even (0)
  EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 1u);
  EXPECT_NE(float_to_half(NAN) & 0x3ffu, 0u);
}

TEST(MatmulQ8_0, QuantisationIsTheReferenceRowLocalAndTheSameOnEveryPath) {
  std::mt19937 rng(5);
  const std::uint32_t cols = 640;
  const std::size_t batch = 9;
  std::vector<float> x = hidden_like(batch, cols, rng);
  for (std::uint32_t i = 64; i < 96; ++i) x[2 * cols + i] = 0.0f;  // an all-zero block
  Buffers expected(batch, cols);
  for (std::size_t b = 0; b < batch; ++b)
    reference_quantize(x.data() + b * cols, cols, expected.q.data() + b * cols, expected.d.data() + b * cols / 32,
                       expected.s.data() + b * cols / 32);
  EXPECT_EQ(expected.d[2 * cols / 32 + 2], 0.0f);
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
    if (!isa_available(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    Buffers got(batch, cols);
    quantize_rows_q8_0(isa, x.data(), cols, got.rows, 0, 4);  // split: the bytes depend on the row alone
    quantize_rows_q8_0(isa, x.data(), cols, got.rows, 4, batch);
    EXPECT_EQ(got.q, expected.q);
    EXPECT_EQ(0, std::memcmp(got.d.data(), expected.d.data(), got.d.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(got.s.data(), expected.s.data(), got.s.size() * sizeof(float)));
  }
  // Within half a step of the fp32 scale, and |q| ≤ 127.
  for (std::size_t b = 0; b < batch; ++b)
    for (std::uint32_t i = 0; i < cols; ++i) {
      float amax = 0.0f;
      for (std::uint32_t l = i / 32 * 32; l < i / 32 * 32 + 32; ++l) amax = std::max(amax, std::fabs(x[b * cols + l]));
      const float d32 = amax / 127.0f;
      ASSERT_LE(std::abs(int{expected.q[b * cols + i]}), 127);
      ASSERT_LE(std::fabs(x[b * cols + i] - d32 * expected.q[b * cols + i]), 0.5f * d32 * (1.0f + 1e-5f) + 1e-30f);
    }
}

TEST(MatmulQ8_0, EveryKernelIsTheReferenceForEveryBatchSizeAndSplit) {
  std::mt19937 rng(17);
  const std::uint32_t rows = 37;
  for (GgmlType type : kLegacyTypes) {
    for (std::uint32_t cols : {32u, 640u, 2048u}) {
      const std::vector<std::uint8_t> bytes = random_matrix(type, rows, cols, rng);
      const MatrixView w{type, bytes.data(), cols, rows, quant_row_bytes(type, cols)};
      ASSERT_TRUE(q8_0_supported(type, cols));
      const std::size_t batch = 70;  // past one 64-row block of activations, and a remainder after groups of 4
      const std::vector<float> x = hidden_like(batch, cols, rng);
      Buffers xq(batch, cols);
      quantize_rows_q8_0(Isa::portable, x.data(), cols, xq.rows, 0, batch);
      std::vector<float> expected(batch * rows);
      for (std::uint32_t r = 0; r < rows; ++r)
        for (std::size_t b = 0; b < batch; ++b)
          expected[b * rows + r] = reference_dot(type, bytes.data() + r * w.row_bytes, cols, xq.q.data() + b * cols,
                                                 xq.d.data() + b * cols / 32, xq.s.data() + b * cols / 32);
      for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
        if (!isa_available(isa)) continue;
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << gguf::ggml_type_traits(type).name << " cols "
                                          << cols);
        // Whole batch, split row ranges (an odd one first, so the row pairs shift).
        std::vector<float> got(batch * rows, -7.0f);
        matmul_rows_q8_0(isa, w, xq.rows, got.data(), rows, 0, 17);
        matmul_rows_q8_0(isa, w, xq.rows, got.data(), rows, 17, rows);
        ASSERT_EQ(0, std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)));
        // Every batch size 1..13 (each tile shape and remainder): each row's outputs are the batch's.
        for (std::size_t n = 1; n <= 13; ++n) {
          Q8_0Rows first = xq.rows;
          first.batch = n;
          std::vector<float> y(n * rows, -3.0f);
          matmul_rows_q8_0(isa, w, first, y.data(), rows, 0, rows);
          ASSERT_EQ(0, std::memcmp(y.data(), expected.data(), y.size() * sizeof(float))) << "batch " << n;
        }
        for (std::size_t b : {std::size_t{1}, std::size_t{37}, std::size_t{69}}) {
          std::vector<float> y(rows, -3.0f);
          matmul_rows_q8_0(isa, w, xq.row(b), y.data(), rows, 0, rows);
          ASSERT_EQ(0, std::memcmp(y.data(), expected.data() + b * rows, rows * sizeof(float))) << "row " << b;
        }
      }
    }
  }
}

// Against a float64 product with the unquantised activations (weights dequantised by quant.hpp). The stored
// activation value dh × q differs from x by at most δ = d32/2 + |dh − d32| × |q| (rounding to the integer,
// then the f16 scale); a minimum term uses s instead of Σx, off by at most Σ|d32 q − x| + |s − d32 Σq|.
// So |error| ≤ Σ_blocks (Σ_e |dw u_e| δ_e + |mw| × that) plus fp32 rounding (1e-5 of Σ|w x|): derived, not
// fitted. The mean error must be well inside it.
TEST(MatmulQ8_0, WithinTheQuantisationBoundOfTheFloat64Product) {
  std::mt19937 rng(23);
  const std::uint32_t rows = 48, cols = 1024;
  for (GgmlType type : kLegacyTypes) {
    SCOPED_TRACE(gguf::ggml_type_traits(type).name);
    const std::vector<std::uint8_t> bytes = random_matrix(type, rows, cols, rng);
    const MatrixView w{type, bytes.data(), cols, rows, quant_row_bytes(type, cols)};
    const std::size_t batch = 8;
    const std::vector<float> x = hidden_like(batch, cols, rng);
    Buffers xq(batch, cols);
    quantize_rows_q8_0(best_isa(), x.data(), cols, xq.rows, 0, batch);
    std::vector<float> y(batch * rows), wrow(cols);
    matmul_rows_q8_0(best_isa(), w, xq.rows, y.data(), rows, 0, rows);
    double error_sum = 0.0, bound_sum = 0.0;
    for (std::uint32_t r = 0; r < rows; ++r) {
      const std::uint8_t* row = bytes.data() + r * w.row_bytes;
      dequantize_row(type, row, wrow.data(), cols);
      for (std::size_t b = 0; b < batch; ++b) {
        const float* xb = x.data() + b * cols;
        double exact = 0.0, magnitude = 0.0, bound = 0.0;
        for (std::uint32_t k = 0; k < cols / 32; ++k) {
          float dw = 0.0f, mw = 0.0f;
          int u[32];
          reference_block(type, row, k, &dw, &mw, u);
          double amax = 0.0;
          for (std::uint32_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double{xb[32 * k + i]}));
          const double d32 = amax / 127.0, dh = xq.d[b * cols / 32 + k], sh = xq.s[b * cols / 32 + k];
          double sum_q = 0.0, off_sum = 0.0;
          for (std::uint32_t i = 0; i < 32; ++i) {
            const double xi = xb[32 * k + i], qi = xq.q[b * cols + 32 * k + i];
            exact += double{wrow[32 * k + i]} * xi;
            magnitude += std::fabs(double{wrow[32 * k + i]} * xi);
            bound += std::fabs(double{dw} * u[i]) * (0.5 * d32 + std::fabs(dh - d32) * std::fabs(qi));
            sum_q += qi;
            off_sum += std::fabs(d32 * qi - xi);
          }
          bound += std::fabs(double{mw}) * (off_sum + std::fabs(sh - d32 * sum_q));
        }
        const double error = std::fabs(y[b * rows + r] - exact);
        ASSERT_LE(error, bound * (1.0 + 1e-4) + 1e-5 * magnitude + 1e-6) << "row " << r << " vector " << b;
        error_sum += error;
        bound_sum += bound;
      }
    }
    EXPECT_LT(error_sum, 0.2 * bound_sum);
  }
}

// The largest integer lanes each format can produce: no saturation in vpmaddubsw (Q8_0's −128 included), no
// overflow, an exact conversion to fp32.
TEST(MatmulQ8_0, ExtremeBlocksAreExact) {
  const std::uint32_t cols = 64;
  std::vector<float> x(cols, -3.0f);  // q = −127 everywhere
  Buffers xq(1, cols);
  quantize_rows_q8_0(Isa::portable, x.data(), cols, xq.rows, 0, 1);
  ASSERT_EQ(xq.q[0], -127);
  const double dx = xq.d[0];
  const std::uint16_t one = 0x3C00;  // 1.0 as a half
  for (GgmlType type : kLegacyTypes) {
    SCOPED_TRACE(gguf::ggml_type_traits(type).name);
    const std::size_t block_bytes = gguf::ggml_type_traits(type).block_bytes;
    std::vector<std::uint8_t> bytes(quant_row_bytes(type, cols), 0);
    double u = 0.0;
    for (std::size_t base = 0; base < bytes.size(); base += block_bytes) {
      std::memcpy(bytes.data() + base, &one, 2);  // d = 1 (m = 0 where there is one)
      if (type == GgmlType::q8_0) {
        std::memset(bytes.data() + base + 2, 0x80, 32);  // −128
        u = -128.0;
      } else if (type == GgmlType::q4_0) {
        u = -8.0;  // nibbles 0
      } else if (type == GgmlType::q5_0) {
        u = -16.0;  // nibbles 0, fifth bits 0
      } else {
        std::memset(bytes.data() + base + 4, 0xFF, block_bytes - 4);  // every bit set: 15 (Q4_1), 31 (Q5_1)
        u = type == GgmlType::q4_1 ? 15.0 : 31.0;
      }
    }
    const MatrixView w{type, bytes.data(), cols, 1, bytes.size()};
    const double expected = u * -127.0 * cols * dx;
    for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
      if (!isa_available(isa)) continue;
      float y = 0.0f;
      matmul_rows_q8_0(isa, w, xq.rows, &y, 1, 0, 1);
      EXPECT_NEAR(y, expected, 1e-6 * std::fabs(expected)) << isa_name(isa);
    }
  }
}

TEST(MatmulQ8_0, NoHeapAllocation) {
  std::mt19937 rng(3);
  for (GgmlType type : kLegacyTypes) {
    const std::vector<std::uint8_t> bytes = random_matrix(type, 8, 256, rng);
    const MatrixView w{type, bytes.data(), 256, 8, quant_row_bytes(type, 256)};
    std::vector<float> x(256, 1.0f), y(8);
    Buffers xq(1, 256);
    const auto before = activekv::testing::heap_allocations();
    quantize_rows_q8_0(best_isa(), x.data(), 256, xq.rows, 0, 1);
    matmul_rows_q8_0(best_isa(), w, xq.rows, y.data(), 8, 0, 8);
    EXPECT_EQ(activekv::testing::heap_allocations(), before);
  }
}

TEST(MatmulQ8_0, SupportedTypes) {
  for (GgmlType type : kLegacyTypes) EXPECT_TRUE(q8_0_supported(type, 640)) << gguf::ggml_type_traits(type).name;
  EXPECT_FALSE(q8_0_supported(GgmlType::q4_0, 48));  // not a whole number of blocks
  EXPECT_FALSE(q8_0_supported(GgmlType::q4_0, 0));
  EXPECT_FALSE(q8_0_supported(GgmlType::q4_k, 512));  // the K-quants take matmul_q8.hpp
  EXPECT_FALSE(q8_0_supported(GgmlType::q2_k, 512));
  EXPECT_FALSE(q8_0_supported(GgmlType::f16, 512));
}

}  // namespace
}  // namespace activekv::engine
