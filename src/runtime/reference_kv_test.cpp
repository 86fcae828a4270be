// reference_kv_test.cpp — the oracle agrees with an independent softmax and keeps rows as encoded.
#include "runtime/reference_kv.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/element_codec.hpp"

namespace activekv::runtime {
namespace {

Geometry small_geometry(DType dtype) {
  Geometry g;
  g.dense_layers = 2;
  g.kv_heads = 2;
  g.head_dim = 16;
  g.dtype = dtype;
  return g;
}

std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// Tolerance: paged fp32 online softmax vs a double two-pass softmax over at most
// a few hundred keys of unit-variance data: 1e-4 absolute on outputs of order 1.
constexpr float attention_tolerance = 1e-4f;

TEST(ReferenceKv, PagedAttentionAgreesWithTwoPassSoftmax) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const Geometry g = small_geometry(dtype);
    const std::uint32_t q_heads = 4;
    for (const std::uint32_t page_tokens : {1u, 4u, 16u}) {
      std::mt19937 rng(page_tokens * 31 + static_cast<unsigned>(dtype));
      ReferenceKv kv(g, q_heads, page_tokens);
      const auto c = kv.open();
      const std::uint32_t tokens = 77;
      const std::size_t head_elems = g.kv_heads * g.head_dim;
      for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
        const auto k = random_floats(rng, tokens * head_elems);
        const auto v = random_floats(rng, tokens * head_elems);
        kv.append(c, l, k.data(), v.data(), tokens);
      }
      ASSERT_EQ(kv.length(c), tokens);
      const std::uint32_t n = 5;
      const auto q = random_floats(rng, n * q_heads * g.head_dim);
      std::vector<float> paged(q.size()), naive(q.size());
      kv.attend(c, 1, q.data(), n, tokens - n, paged.data());
      kv.attend_naive(c, 1, q.data(), n, tokens - n, naive.data());
      for (std::size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(paged[i], naive[i], attention_tolerance) << i;
    }
  }
}

TEST(ReferenceKv, CausalMaskHidesLaterKeys) {
  const Geometry g = small_geometry(DType::f32);
  std::mt19937 rng(5);
  ReferenceKv kv(g, 2, 4);
  const auto c = kv.open();
  const std::size_t head_elems = g.kv_heads * g.head_dim;
  auto k = random_floats(rng, 10 * head_elems);
  auto v = random_floats(rng, 10 * head_elems);
  for (std::uint32_t l = 0; l < 2; ++l) kv.append(c, l, k.data(), v.data(), 10);
  const auto q = random_floats(rng, 2 * g.head_dim);
  std::vector<float> before(q.size()), after(q.size());
  kv.attend(c, 0, q.data(), 1, 3, before.data());
  // A query at position 0 sees exactly one key: the output is that key's V.
  std::vector<float> first(q.size());
  kv.attend(c, 0, q.data(), 1, 0, first.data());
  for (std::uint32_t h = 0; h < 2; ++h)
    for (std::uint32_t e = 0; e < g.head_dim; ++e) EXPECT_EQ(first[h * g.head_dim + e], v[h * g.head_dim + e]);
  // Appending more keys does not change a query at position 3.
  for (std::uint32_t l = 0; l < 2; ++l) kv.append(c, l, k.data(), v.data(), 10);
  kv.attend(c, 0, q.data(), 1, 3, after.data());
  EXPECT_EQ(before, after);
}

TEST(ReferenceKv, EncodedRowIsKThenVInTheDtype) {
  const Geometry g = small_geometry(DType::f16);
  std::mt19937 rng(9);
  ReferenceKv kv(g, 2, 4);
  const auto c = kv.open();
  const std::size_t head_elems = g.kv_heads * g.head_dim;
  const auto k = random_floats(rng, 3 * head_elems);
  const auto v = random_floats(rng, 3 * head_elems);
  kv.append(c, 0, k.data(), v.data(), 3);
  const auto row = kv.encoded_row(c, 0, 2);
  ASSERT_EQ(row.size(), g.row_bytes());
  std::vector<std::uint16_t> expected(2 * head_elems);
  encode_elements(DType::f16, k.data() + 2 * head_elems, head_elems, expected.data());
  encode_elements(DType::f16, v.data() + 2 * head_elems, head_elems, expected.data() + head_elems);
  EXPECT_EQ(std::memcmp(row.data(), expected.data(), row.size()), 0);
}

}  // namespace
}  // namespace activekv::runtime
