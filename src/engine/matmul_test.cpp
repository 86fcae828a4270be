// matmul_test.cpp — every instruction-set path against the portable one, for
// every supported type, batch sizes that exercise each vector grouping (1..13),
// and row ranges that start and stop inside the matrix.
#include "engine/matmul.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/matmul_q16.hpp"
#include "engine/quant_blocks.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::engine {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::f32,  GgmlType::f16,  GgmlType::bf16, GgmlType::q4_0, GgmlType::q4_1,
                               GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0, GgmlType::q2_k, GgmlType::q3_k,
                               GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};
// The types the 16-bit-activation path reads (formats/all.hpp).
constexpr GgmlType kQ16Types[] = {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0,
                                  GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};

// Random bytes with every f16 scale field replaced by a small finite value, so
// no block decodes to inf or NaN.
// fill ≥ 0: every byte but the f16 scale fields is `fill` instead (0x00, 0x7f, 0x80, 0xff: the extreme integers and
// group scales of each format).
std::vector<std::uint8_t> random_matrix(GgmlType type, std::uint32_t rows, std::uint32_t cols, std::mt19937& rng,
                                        int fill = -1) {
  const std::size_t row_bytes = quant_row_bytes(type, cols);
  std::vector<std::uint8_t> bytes(rows * row_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(fill >= 0 ? fill : byte(rng));
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
      case GgmlType::q4_1: case GgmlType::q5_1: case GgmlType::q4_k: case GgmlType::q5_k:
        put_half(base, normal(rng));
        put_half(base + 2, normal(rng));
        break;
      case GgmlType::q6_k: put_half(base + offsetof(blocks::BlockQ6_K, d), normal(rng)); break;
      case GgmlType::q3_k: put_half(base + offsetof(blocks::BlockQ3_K, d), normal(rng)); break;
      case GgmlType::q2_k:
        put_half(base + offsetof(blocks::BlockQ2_K, d), normal(rng));
        put_half(base + offsetof(blocks::BlockQ2_K, dmin), normal(rng));
        break;
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


// ---- The 16-bit-activation path (matmul_q16.hpp) ----

struct Q16Buffers {
  std::vector<std::int16_t> q;
  std::vector<float> d, s;
  Q16Rows rows;
  Q16Buffers(std::size_t batch, std::uint32_t cols)
      : q(batch * cols, 99), d(batch * cols / 32, -1.0f), s(batch * cols / 32, -1.0f),
        rows{q.data(), d.data(), s.data(), cols, batch} {}
};

// Activations like a hidden state's: mostly small, a few large outliers, a zero block.
std::vector<float> hidden_like(std::size_t batch, std::uint32_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 63);
  std::vector<float> x(batch * cols);
  for (float& v : x) v = pick(rng) == 0 ? 20.0f * normal(rng) : normal(rng);
  for (std::uint32_t i = 0; i < 32 && i < cols; ++i) x[i] = 0.0f;  // row 0, block 0: d = 0
  return x;
}

TEST(MatmulQ16, QuantisationIsRowLocalBoundedAndTheSameOnEveryPath) {
  std::mt19937 rng(5);
  const std::uint32_t cols = 576;
  const std::size_t batch = 9;
  const std::vector<float> x = hidden_like(batch, cols, rng);
  Q16Buffers portable(batch, cols);
  quantize_rows_q16(Isa::portable, x.data(), cols, portable.rows, 0, batch);
  for (std::size_t b = 0; b < batch; ++b) {
    for (std::uint32_t k = 0; k < cols / 32; ++k) {
      const float d = portable.d[b * cols / 32 + k];
      int sum = 0;
      for (std::uint32_t i = 0; i < 32; ++i) {
        const std::size_t e = b * cols + k * 32 + i;
        ASSERT_LE(std::abs(portable.q[e]), 32767);
        // Round to nearest: the value is within half a step, plus the fp32 rounding of d, 1/d and x × (1/d)
        // (a few units of 2^-24 of |x|, which is up to 32767 steps).
        ASSERT_LE(std::fabs(double{x[e]} - double{d} * portable.q[e]), 0.5 * d + 3e-7 * std::fabs(x[e]))
            << "element " << e;
        sum += portable.q[e];
      }
      ASSERT_EQ(portable.s[b * cols / 32 + k], d * static_cast<float>(sum));
    }
  }
  EXPECT_EQ(portable.d[0], 0.0f);
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (!isa_available(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    Q16Buffers got(batch, cols);
    // Row by row in two calls: a row's bytes do not depend on the others.
    quantize_rows_q16(isa, x.data(), cols, got.rows, 0, 4);
    quantize_rows_q16(isa, x.data(), cols, got.rows, 4, batch);
    EXPECT_EQ(0, std::memcmp(got.q.data(), portable.q.data(), got.q.size() * sizeof(std::int16_t)));
    EXPECT_EQ(0, std::memcmp(got.d.data(), portable.d.data(), got.d.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(got.s.data(), portable.s.data(), got.s.size() * sizeof(float)));
  }
}

TEST(MatmulQ16, EveryPathGivesThePortableBitsAndEachOutputIsIndependentOfTheBatch) {
  std::mt19937 rng(17);
  const std::uint32_t rows = 37;
  for (GgmlType type : kQ16Types) {
    const bool k_type = gguf::ggml_type_traits(type).block_elements == 256;
    // 18, 48 and 3 blocks (with and without a tail of Σ m × s); the K types: 2, 6 and 1 super-blocks.
    for (std::uint32_t cols : k_type ? std::vector<std::uint32_t>{512u, 1536u, 256u} : std::vector<std::uint32_t>{576u, 1536u, 96u}) {
      const std::vector<std::uint8_t> bytes = random_matrix(type, rows, cols, rng);
      const MatrixView w{type, bytes.data(), cols, rows, quant_row_bytes(type, cols)};
      ASSERT_TRUE(q16_supported(type, cols));
      const std::size_t batch = 70;  // past one 64-row block of activations, and a remainder of 2 after groups of 4
      const std::vector<float> x = hidden_like(batch, cols, rng);
      Q16Buffers xq(batch, cols);
      quantize_rows_q16(Isa::portable, x.data(), cols, xq.rows, 0, batch);
      std::vector<float> scratch(cols);
      std::vector<float> expected(batch * rows, -1.0f);
      matmul_rows_q16(Isa::portable, w, xq.rows, expected.data(), rows, 0, rows, scratch.data());
      for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512}) {
        if (!isa_available(isa)) continue;
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " " << gguf::ggml_type_traits(type).name << " cols " << cols);
        // Whole batch, split row ranges (an odd one first, so the row pairs shift).
        std::vector<float> got(batch * rows, -7.0f);
        matmul_rows_q16(isa, w, xq.rows, got.data(), rows, 0, 17, scratch.data());
        matmul_rows_q16(isa, w, xq.rows, got.data(), rows, 17, rows, scratch.data());
        ASSERT_EQ(0, std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)));
        // Each activation row alone (a decode step): the same bits as inside the batch.
        for (std::size_t b : {std::size_t{0}, std::size_t{5}, std::size_t{69}}) {
          const Q16Rows one{xq.q.data() + b * cols, xq.d.data() + b * cols / 32, xq.s.data() + b * cols / 32, cols, 1};
          std::vector<float> y(rows, -3.0f);
          matmul_rows_q16(isa, w, one, y.data(), rows, 0, rows, scratch.data());
          ASSERT_EQ(0, std::memcmp(y.data(), expected.data() + b * rows, rows * sizeof(float))) << "row " << b;
        }
      }
    }
  }
}

// The AVX-512 kernels (two weight rows per register, tiles of 8 rows at batch 1-3 and 4 rows × 4 activation
// rows above, remainders of 1-3 activation rows, a last odd row paired with itself) against the portable path by memcmp: every format, batch
// sizes 1..9, odd row counts and row ranges that start on an odd row, random and extreme blocks (the largest
// integers of each format against activations at ±32767), within the scratch matmul_q16.hpp promises.
TEST(MatmulQ16, Avx512KernelsGiveThePortableBitsForEveryBatchRowCountAndExtremeBlock) {
  if (q16_kernel_isa(Isa::avx512) != Isa::avx512)
    GTEST_SKIP() << "this CPU lacks AVX-512 F/BW/VL with VNNI: the AVX-512 kernels of matmul_q16 are not run here";
  std::mt19937 rng(41);
  const int fills[] = {-1, 0x00, 0x7f, 0x80, 0xff};
  for (GgmlType type : kQ16Types) {
    const bool k_type = gguf::ggml_type_traits(type).block_elements == 256;
    // 3 and 9 blocks (no whole group of 8 minimums, and one group with a tail); the K types: 1 and 2 super-blocks.
    for (std::uint32_t cols : k_type ? std::vector<std::uint32_t>{256u, 512u} : std::vector<std::uint32_t>{96u, 288u}) {
      for (int fill : fills) {
        for (std::uint32_t rows : {1u, 3u, 5u, 7u, 9u, 19u}) {
          SCOPED_TRACE(::testing::Message() << gguf::ggml_type_traits(type).name << " cols " << cols << " rows " << rows
                                            << " fill " << fill);
          const std::vector<std::uint8_t> bytes = random_matrix(type, rows, cols, rng, fill);
          const MatrixView w{type, bytes.data(), cols, rows, quant_row_bytes(type, cols)};
          const std::size_t batch_max = 9;
          // Random hidden-state rows, then (extreme blocks) every value at full scale: q = +32767, -32767, alternating.
          std::vector<float> x = hidden_like(batch_max, cols, rng);
          if (fill >= 0)
            for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i / cols) % 3 == 0 ? 1.0f : ((i / cols) % 3 == 1 ? -1.0f : (i % 2 ? 1.0f : -1.0f));
          for (std::size_t batch = 1; batch <= batch_max; ++batch) {
            Q16Buffers xq(batch, cols);
            quantize_rows_q16(Isa::portable, x.data(), cols, xq.rows, 0, batch);
            std::vector<float> expected(batch * rows, -1.0f);
            std::vector<float> scratch(cols);
            matmul_rows_q16(Isa::portable, w, xq.rows, expected.data(), rows, 0, rows, scratch.data());
            // Exactly the promised scratch (w.cols / 2 floats), then sentinels the kernel must not touch.
            const std::size_t promised = cols / 2;
            std::vector<float> tight(promised + 16, 12345.0f);
            std::vector<float> got(batch * rows, -7.0f);
            matmul_rows_q16(Isa::avx512, w, xq.rows, got.data(), rows, 0, rows, tight.data());
            ASSERT_EQ(0, std::memcmp(got.data(), expected.data(), got.size() * sizeof(float))) << "batch " << batch;
            for (std::size_t i = promised; i < tight.size(); ++i) ASSERT_EQ(tight[i], 12345.0f) << "scratch overrun";
            // Row ranges from an odd row: [0, 1) alone, then the rest (their pairs shift by one).
            std::fill(got.begin(), got.end(), -7.0f);
            matmul_rows_q16(Isa::avx512, w, xq.rows, got.data(), rows, 0, 1, tight.data());
            matmul_rows_q16(Isa::avx512, w, xq.rows, got.data(), rows, 1, rows, tight.data());
            ASSERT_EQ(0, std::memcmp(got.data(), expected.data(), got.size() * sizeof(float))) << "batch " << batch << " split";
          }
        }
      }
    }
  }
}

// The legacy formats' f16 factors (d, and m where the format has one) of every class: normal, subnormal, ±0,
// the largest finite, and, in the last two rows only, ±infinity and quiet and signalling NaN, in a group of 8
// blocks and in the tail after the groups. The AVX2 path converts 8 factors at a time with F16C (exact) and
// keeps the portable conversion from a group with an infinity or a NaN on: rows of finite factors give the
// portable bits, and the others the same values, NaN where it gives NaN (a NaN's payload may follow operand order).
TEST(MatmulQ16, EveryClassOfHalfFactorGivesThePortableResult) {
  std::mt19937 rng(29);
  const std::uint32_t rows = 8, cols = 576;  // 18 blocks: two groups of 8 and a tail of 2
  const std::uint16_t finite[] = {0x3c00, 0xb555, 0x0001, 0x03ff, 0x8200, 0x0000, 0x8000, 0x7bff, 0x0400, 0x2e66};
  const std::uint16_t special[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01};
  const GgmlType legacy[] = {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0};
  for (GgmlType type : legacy) {
    SCOPED_TRACE(gguf::ggml_type_traits(type).name);
    std::vector<std::uint8_t> bytes = random_matrix(type, rows, cols, rng);
    const MatrixView w{type, bytes.data(), cols, rows, quant_row_bytes(type, cols)};
    const std::size_t block_bytes = gguf::ggml_type_traits(type).block_bytes;
    const bool has_min = type == GgmlType::q4_1 || type == GgmlType::q5_1;
    for (std::uint32_t r = 0; r < rows; ++r) {
      for (std::uint32_t k = 0; k < cols / 32; ++k) {
        std::uint8_t* block = bytes.data() + r * w.row_bytes + k * block_bytes;
        for (int field = 0; field < (has_min ? 2 : 1); ++field) {
          std::uint16_t h = finite[(r + 3 * k + 5 * field) % std::size(finite)];
          // Rows 6 and 7: one special factor in the second group (block 9 or 12), another in the tail (block 17).
          if (r >= 6 && (k == 17 || k == (r == 6 ? 9u : 12u)) && field == (k == 17 ? 0 : (has_min ? 1 : 0)))
            h = special[(r - 6) * 2 + (k == 17 ? 1 : 0)];
          std::memcpy(block + 2 * field, &h, 2);
        }
      }
    }
    const std::size_t batch = 5;
    const std::vector<float> x = hidden_like(batch, cols, rng);
    Q16Buffers xq(batch, cols);
    quantize_rows_q16(Isa::portable, x.data(), cols, xq.rows, 0, batch);
    std::vector<float> scratch(cols), expected(batch * rows);
    matmul_rows_q16(Isa::portable, w, xq.rows, expected.data(), rows, 0, rows, scratch.data());
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::uint32_t r = 0; r < 6; ++r) ASSERT_TRUE(std::isfinite(expected[b * rows + r])) << "row " << r;
      for (std::uint32_t r = 6; r < rows; ++r) ASSERT_FALSE(std::isfinite(expected[b * rows + r])) << "row " << r;
    }
    for (Isa isa : {Isa::avx2, Isa::avx512}) {
      if (!isa_available(isa)) continue;
      SCOPED_TRACE(isa_name(isa));
      std::vector<float> got(batch * rows, -5.0f);
      matmul_rows_q16(isa, w, xq.rows, got.data(), rows, 0, rows, scratch.data());
      for (std::size_t b = 0; b < batch; ++b) {
        for (std::uint32_t r = 0; r < rows; ++r) {
          const float e = expected[b * rows + r], g = got[b * rows + r];
          if (std::isnan(e)) {
            EXPECT_TRUE(std::isnan(g)) << "row " << r << " vector " << b;
          } else {
            EXPECT_EQ(0, std::memcmp(&e, &g, sizeof e)) << "row " << r << " vector " << b << ": " << e << " vs " << g;
          }
        }
      }
    }
  }
}

// Against a float64 product with the unquantised activations. Quantising a
// block moves each x by at most d/2, so |error| ≤ Σ_blocks (d/2) Σ|w| plus
// fp32 rounding (1e-5 of Σ|w·x|): the bound is derived, not fitted. The mean
// error must also be well inside it (rounding errors largely cancel).
TEST(MatmulQ16, WithinTheQuantisationBoundOfTheFloat64Product) {
  std::mt19937 rng(23);
  const std::uint32_t rows = 64, cols = 512;
  for (GgmlType type : kQ16Types) {
    SCOPED_TRACE(gguf::ggml_type_traits(type).name);
    const std::vector<std::uint8_t> bytes = random_matrix(type, rows, cols, rng);
    const MatrixView w{type, bytes.data(), cols, rows, quant_row_bytes(type, cols)};
    const std::size_t batch = 8;
    const std::vector<float> x = hidden_like(batch, cols, rng);
    Q16Buffers xq(batch, cols);
    quantize_rows_q16(best_isa(), x.data(), cols, xq.rows, 0, batch);
    std::vector<float> y(batch * rows), wrow(cols), scratch(cols);
    matmul_rows_q16(best_isa(), w, xq.rows, y.data(), rows, 0, rows, scratch.data());
    double error_sum = 0.0, bound_sum = 0.0;
    for (std::uint32_t r = 0; r < rows; ++r) {
      dequantize_row(type, bytes.data() + r * w.row_bytes, wrow.data(), cols);
      for (std::size_t b = 0; b < batch; ++b) {
        double exact = 0.0, magnitude = 0.0, bound = 0.0;
        for (std::uint32_t k = 0; k < cols / 32; ++k) {
          double block_w = 0.0;
          for (std::uint32_t i = k * 32; i < k * 32 + 32; ++i) {
            exact += double{wrow[i]} * x[b * cols + i];
            magnitude += std::fabs(double{wrow[i]} * x[b * cols + i]);
            block_w += std::fabs(wrow[i]);
          }
          bound += 0.5 * xq.d[b * cols / 32 + k] * block_w;
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

TEST(MatmulQ16, NoHeapAllocation) {
  std::mt19937 rng(3);
  const std::vector<std::uint8_t> bytes = random_matrix(GgmlType::q4_1, 8, 64, rng);
  const MatrixView w{GgmlType::q4_1, bytes.data(), 64, 8, quant_row_bytes(GgmlType::q4_1, 64)};
  std::vector<float> x(64, 1.0f), y(8), scratch(64);
  Q16Buffers xq(1, 64);
  const auto before = activekv::testing::heap_allocations();
  quantize_rows_q16(best_isa(), x.data(), 64, xq.rows, 0, 1);
  matmul_rows_q16(best_isa(), w, xq.rows, y.data(), 8, 0, 8, scratch.data());
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
}

TEST(MatmulQ16, SupportedTypes) {
  for (GgmlType type : kQ16Types) EXPECT_TRUE(q16_supported(type, 512)) << gguf::ggml_type_traits(type).name;
  EXPECT_TRUE(q16_supported(GgmlType::q4_1, 576));
  EXPECT_FALSE(q16_supported(GgmlType::q4_k, 576));  // not a whole number of super-blocks
  EXPECT_FALSE(q16_supported(GgmlType::f16, 512));
  EXPECT_FALSE(q16_supported(GgmlType::f32, 576));
  EXPECT_FALSE(q16_supported(GgmlType::q4_1, 0));
}

}  // namespace
}  // namespace activekv::engine
