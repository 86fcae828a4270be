// elementwise_test.cpp — exp, SwiGLU, GELU(tanh) and RMS norm (elementwise.hpp): the same bits
// on every instruction set and for every split of an array, and their accuracy against libm in double.
//
// Inputs: a sweep over the float bit patterns of both signs (every 4099th, ~2M values, zeros,
// subnormals, infinities and NaNs among them), the edges of exp's range and their neighbours,
// and normal random values at the scales an FFN's gate sees.
#include "engine/elementwise.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "testing/alloc_counter.hpp"

namespace activekv::engine {
namespace {

constexpr Isa kIsas[] = {Isa::portable, Isa::avx2, Isa::avx512};

std::vector<float> test_inputs() {
  std::vector<float> v;
  for (std::uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4099) v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  const float inf = std::numeric_limits<float>::infinity();
  const float edges[] = {0.0f,  -0.0f,   FLT_TRUE_MIN, -FLT_TRUE_MIN, FLT_MIN,       -FLT_MIN, FLT_MAX, -FLT_MAX,
                         inf,   -inf,    std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                         1.0f,  -1.0f,   0.5f,         -0.5f,         0.34657359f,   -0.34657359f,
                         88.0f, 88.37626f, 88.5f,      88.7228f,      88.72284f,     88.7229f, 89.0f, 89.5f, 100.0f,
                         -87.0f, -87.33654f, -87.5f,   -100.0f,       -103.0f,       -103.27893f, -103.97208f,
                         -104.0f, -104.5f, -150.0f,    1e-8f,         -1e-8f,        20.0f,    -20.0f};
  for (float e : edges) {
    v.push_back(e);
    v.push_back(std::nextafter(e, inf));
    v.push_back(std::nextafter(e, -inf));
  }
  std::mt19937 rng(7);
  for (float scale : {0.1f, 1.0f, 4.0f, 30.0f}) {
    std::normal_distribution<float> normal(0.0f, scale);
    for (int i = 0; i < 20000; ++i) v.push_back(normal(rng));
  }
  return v;
}

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

// SwiGLU and GELU(tanh) in double. The GELU through std::tanh where 1 + tanh(t) ≥ 9e-5 (t ≥ −5),
// so the sum's cancellation costs under 2⁻³⁹; below, 1 + tanh(t) = 2 / (1 + e^(−2t)) through std::exp.
double swiglu_reference(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }
double gelu_tanh_reference(double g, double u) {
  const double t = 0.7978845608028654 * (g + 0.044715 * g * g * g);
  const double one_plus_tanh = t >= -5.0 ? 1.0 + std::tanh(t) : 2.0 / (1.0 + std::exp(-2.0 * t));
  return 0.5 * g * one_plus_tanh * u;
}

TEST(Elementwise, ExpSameBitsOnEveryIsa) {
  const std::vector<float> x = test_inputs();
  std::vector<float> expected(x.size());
  exp_values(Isa::portable, x.data(), expected.data(), x.size());
  for (Isa isa : kIsas) {
    if (!isa_available(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> got(x.size(), -1.0f);
    exp_values(isa, x.data(), got.data(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_TRUE(same_bits(got[i], expected[i])) << "exp(" << x[i] << "): " << got[i] << " vs " << expected[i];
  }
}

// exp(x[i]) = y[i] against e^x in double: within `ulps_max` ulp of the correctly rounded value where
// e^x ≥ FLT_MIN, within one subnormal step (2⁻¹⁴⁹) below, +inf exactly where e^x rounds past FLT_MAX,
// and the NaN itself for a NaN. Returns the largest error in ulp where e^x is normal.
double expect_exp_accuracy(const float* x, const float* y, std::size_t count, double ulps_max) {
  double worst = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(same_bits(y[i], x[i])) << "exp(NaN) keeps the NaN";
      continue;
    }
    const double ref = std::exp(static_cast<double>(x[i]));
    if (ref > static_cast<double>(FLT_MAX)) {
      // Rounded to float, e^x is FLT_MAX only within half an ulp above it.
      if (static_cast<float>(ref) == std::numeric_limits<float>::infinity()) {
        EXPECT_EQ(y[i], std::numeric_limits<float>::infinity()) << x[i];
      }
      continue;
    }
    if (ref < static_cast<double>(FLT_MIN)) {
      EXPECT_LE(std::fabs(static_cast<double>(y[i]) - ref), std::ldexp(1.0, -149)) << "exp(" << x[i] << ")";
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);
    const double ulps = std::fabs(static_cast<double>(y[i]) - ref) / ulp;
    worst = std::max(worst, ulps);
    EXPECT_LE(ulps, ulps_max) << "exp(" << x[i] << "): " << y[i] << " vs " << ref;
  }
  return worst;
}

// 1.02 ulp: every float's worst is 1.0103 ulp (ExpAccuracyEveryFloat).
constexpr double exp_ulps_max = 1.02;

TEST(Elementwise, ExpAccuracy) {
  const std::vector<float> x = test_inputs();
  std::vector<float> y(x.size());
  exp_values(best_isa(), x.data(), y.data(), x.size());
  const double worst = expect_exp_accuracy(x.data(), y.data(), x.size(), exp_ulps_max);
  std::printf("exp: max error %.4f ulp over %zu inputs\n", worst, x.size());
}

// Every one of the 2³² bit patterns (ACTIVEKV_LONG=1; about a minute on one core).
TEST(Elementwise, ExpAccuracyEveryFloat) {
  if (std::getenv("ACTIVEKV_LONG") == nullptr) GTEST_SKIP() << "ACTIVEKV_LONG=1 sweeps every float";
  std::vector<float> x(1 << 20), y(1 << 20);
  double worst = 0.0;
  for (std::uint64_t base = 0; base < (std::uint64_t{1} << 32); base += x.size()) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(base + i));
    exp_values(best_isa(), x.data(), y.data(), x.size());
    worst = std::max(worst, expect_exp_accuracy(x.data(), y.data(), x.size(), exp_ulps_max));
    if (::testing::Test::HasFailure()) return;
  }
  std::printf("exp: max error %.4f ulp over every float\n", worst);
}

// Every pairing of the inputs' gates with up values (shuffled inputs, ones, extremes).
struct GatePairs {
  std::vector<float> gate, up;
};

GatePairs gate_pairs() {
  GatePairs p;
  p.gate = test_inputs();
  p.up = p.gate;
  std::mt19937 rng(11);
  std::shuffle(p.up.begin(), p.up.end(), rng);
  for (std::size_t i = 0; i < p.up.size(); i += 3) p.up[i] = 1.0f;
  return p;
}

void expect_same_activation_bits(FfnKind kind) {
  const GatePairs p = gate_pairs();
  std::vector<float> expected = p.gate;
  activate_values(Isa::portable, kind, expected.data(), p.up.data(), expected.size());
  for (Isa isa : kIsas) {
    if (!isa_available(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> got = p.gate;
    activate_values(isa, kind, got.data(), p.up.data(), got.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(expected[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << "gate " << p.gate[i] << " up " << p.up[i];
        continue;
      }
      ASSERT_TRUE(same_bits(got[i], expected[i]))
          << "gate " << p.gate[i] << " up " << p.up[i] << ": " << got[i] << " vs " << expected[i];
    }
    // Split into pieces of 1, 2, ... 37 values (every tail length of both vector widths): the same bits.
    std::vector<float> pieces = p.gate;
    for (std::size_t begin = 0, n = 1; begin < pieces.size(); begin += n, n = n % 37 + 1) {
      const std::size_t count = std::min(n, pieces.size() - begin);
      activate_values(isa, kind, pieces.data() + begin, p.up.data() + begin, count);
    }
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(same_bits(pieces[i], got[i]) || (std::isnan(pieces[i]) && std::isnan(got[i]))) << "value " << i;
  }
}

TEST(Elementwise, SwigluSameBitsOnEveryIsaAndSplit) { expect_same_activation_bits(FfnKind::swiglu); }
TEST(Elementwise, GeluTanhSameBitsOnEveryIsaAndSplit) { expect_same_activation_bits(FfnKind::geglu_tanh); }

// Against double-precision libm (std::exp, std::tanh) for finite gates with |g| ≤ 64 and up = 1:
// |error| ≤ rel × |ref| + abs. SwiGLU: rel 2⁻²¹ (a few roundings). GELU(tanh): its exponent
// z = −2√(2/π)(g + 0.044715 g³) carries a relative error of a few 2⁻²⁴, which e^z turns into
// |z| × that: rel 2⁻²¹ × (1 + |z|). abs 1e-30 covers results that are all but zero (g ≪ 0).
void expect_activation_accuracy(FfnKind kind) {
  std::vector<float> gate;
  for (float g : test_inputs())
    if (std::isfinite(g) && std::fabs(g) <= 64.0f) gate.push_back(g);
  std::vector<float> up(gate.size(), 1.0f);
  std::vector<float> y = gate;
  activate_values(best_isa(), kind, y.data(), up.data(), y.size());
  double rel_max = 0.0;
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double ref = kind == FfnKind::swiglu ? swiglu_reference(g, 1.0) : gelu_tanh_reference(g, 1.0);
    const double z = kind == FfnKind::swiglu ? g : 1.5957691216057308 * (g + 0.044715 * g * g * g);
    const double rel = std::ldexp(1.0, -21) * (kind == FfnKind::swiglu ? 1.0 : 1.0 + std::fabs(z));
    const double err = std::fabs(static_cast<double>(y[i]) - ref);
    if (std::fabs(ref) > 1e-30) rel_max = std::max(rel_max, err / (rel * std::fabs(ref)));
    ASSERT_LE(err, rel * std::fabs(ref) + 1e-30) << "gate " << gate[i] << ": " << y[i] << " vs " << ref;
  }
  std::printf("%s: max relative error %.3f of the bound\n", kind == FfnKind::swiglu ? "swiglu" : "gelu_tanh", rel_max);
}

TEST(Elementwise, SwigluAccuracy) { expect_activation_accuracy(FfnKind::swiglu); }
TEST(Elementwise, GeluTanhAccuracy) { expect_activation_accuracy(FfnKind::geglu_tanh); }

// RMS norm in the order elementwise_lanes.hpp documents, written out here with std::fma.
std::vector<float> norm_in_documented_order(const std::vector<float>& x, const std::vector<float>& w, std::size_t width,
                                            std::size_t rows, float eps) {
  std::vector<float> out(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * width;
    float sums[16] = {};
    for (std::size_t i = 0; i < width; ++i) sums[i % 16] = std::fma(xr[i], xr[i], sums[i % 16]);
    for (std::size_t half = 8; half >= 1; half /= 2)
      for (std::size_t j = 0; j < half; ++j) sums[j] = sums[j] + sums[j + half];
    const float k = 1.0f / std::sqrt(sums[0] / static_cast<float>(width) + eps);
    for (std::size_t i = 0; i < width; ++i) out[r * width + i] = (xr[i] * k) * w[i];
  }
  return out;
}

// Every width from 1 to 70 (each tail of 8 and 16 lanes) and the models' (256, 640, 2048, 2560),
// rows of values from 1e-20 to 1e15 in magnitude: the documented order's bits on every set, in
// one call or row by row, in place or not; within 2⁻²⁰ of the norm in double.
TEST(Elementwise, RmsNormSameBitsOnEveryIsa) {
  std::vector<std::size_t> widths;
  for (std::size_t w = 1; w <= 70; ++w) widths.push_back(w);
  for (std::size_t w : {256u, 640u, 2048u, 2560u}) widths.push_back(w);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 15);
  constexpr float eps = 1e-6f;
  for (std::size_t width : widths) {
    constexpr std::size_t rows = 5;
    std::vector<float> x(rows * width), w(width);
    for (std::size_t r = 0; r < rows; ++r) {
      const float magnitude = std::pow(10.0f, static_cast<float>(exponent(rng)));
      for (std::size_t i = 0; i < width; ++i) x[r * width + i] = normal(rng) * magnitude;
    }
    for (float& v : w) v = 1.0f + 0.5f * normal(rng);
    const std::vector<float> expected = norm_in_documented_order(x, w, width, rows, eps);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const std::size_t r = i / width;
      double sum = 0.0;
      for (std::size_t j = 0; j < width; ++j) sum += static_cast<double>(x[r * width + j]) * x[r * width + j];
      const double ref = x[i] / std::sqrt(sum / static_cast<double>(width) + eps) * w[i % width];
      ASSERT_LE(std::fabs(expected[i] - ref), std::ldexp(std::fabs(ref), -20) + 1e-30) << "width " << width;
    }
    for (Isa isa : kIsas) {
      if (!isa_available(isa)) continue;
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " width " << width);
      std::vector<float> got(x.size(), -1.0f);
      rms_norm_rows(isa, x.data(), w.data(), got.data(), width, rows, eps);
      std::vector<float> in_place = x;
      for (std::size_t r = 0; r < rows; ++r)
        rms_norm_rows(isa, in_place.data() + r * width, w.data(), in_place.data() + r * width, width, 1, eps);
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(same_bits(got[i], expected[i])) << "value " << i << ": " << got[i] << " vs " << expected[i];
        ASSERT_TRUE(same_bits(in_place[i], expected[i])) << "value " << i << " (in place, row by row)";
      }
    }
  }
}

TEST(Elementwise, NoHeapAllocation) {
  std::vector<float> x(1000, 0.5f), y(1000), w(1000, 1.0f);
  const auto before = activekv::testing::heap_allocations();
  for (Isa isa : kIsas) {
    if (!isa_available(isa)) continue;
    exp_values(isa, x.data(), y.data(), 999);
    activate_values(isa, FfnKind::swiglu, y.data(), x.data(), 999);
    activate_values(isa, FfnKind::geglu_tanh, y.data(), x.data(), 999);
    rms_norm_rows(isa, x.data(), w.data(), y.data(), 333, 3, 1e-6f);
  }
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
}

}  // namespace
}  // namespace activekv::engine
