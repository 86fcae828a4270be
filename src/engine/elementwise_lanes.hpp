// elementwise_lanes.hpp — exp, the gated activations and RMS norm, written once as a fixed
// sequence of lane operations that every instruction set replays (elementwise.hpp).
//
// The templates below take `L`, an instruction set's lane operations: one float in the
// portable path (elementwise.cpp, fma is std::fma), 8 lanes in elementwise_avx2.cpp, 16 in
// elementwise_avx512.cpp. Each operation of L is one IEEE-754 operation rounded once to
// nearest (fma included, rounded once), and min/max/keep_nan/scale_pow2 are defined bit for
// bit below, so a lane's result depends on its input alone: the same bits on every path,
// for any split of the values between calls or threads. The files are compiled with
// -ffp-contract=off so that no compiler fuses a product the sequence keeps apart.
//
// exp(x), for float x:
//   c = min(max(x, −104), 89)         min(a, b) = a < b ? a : b, max(a, b) = a > b ? a : b (x86's minps/maxps)
//   n = (c × log2e + 1.5·2²³) − 1.5·2²³   c × log2e rounded to the nearest integer (|n| ≤ 151)
//   r = fma(−n, ln2_lo, fma(−n, ln2_hi, c))   c − n·ln2, |r| ≲ 0.35
//   P = ((((p0·r + p1)·r + p2)·r + p3)·r + p4)·r + p5   each step one fma (Cephes expf's minimax)
//   e = fma(P, r·r, r) + 1            e^r
//   y = (e × 2^⌊n/2⌋) × 2^(n − ⌊n/2⌋)    two exact powers of two: the first product is exact, the second
//                                      rounds once, so results reach the subnormals and overflow to +inf
//   exp(x) = x where x is NaN, else y
// Below −104 the result is +0 (e^−104 is under half the smallest subnormal); above 89, +inf.
// Accuracy against the correctly rounded e^x: elementwise_test.cpp states and checks the bound.
//
// The gated activations, g the gate, u the up value (blocks.hpp, activate):
//   SwiGLU       g / (1 + exp(−g)) × u                         silu(g) u
//   GELU(tanh)   g / (1 + exp(g × fma(k1, g × g, k0))) × u     0.5 g (1 + tanh(√(2/π)(g + 0.044715 g³))) u,
//                                                                since 0.5 (1 + tanh t) = 1 / (1 + e^(−2t)):
//                                                                k0 = −2√(2/π), k1 = −2√(2/π) × 0.044715
// Each is evaluated left to right as written (the division, then the product with u).
//
// RMS norm of a row x of n values with weights w:
//   s_j = Σ fma(x_i, x_i, ·) over i ≡ j (mod 16), i ascending, from +0   16 partial sums, j < 16
//   s   = the 16 folded in halves: s_j += s_(j+8), then s_j += s_(j+4), s_j += s_(j+2), s_0 += s_1
//   k   = 1 / sqrt(s / n + eps)
//   y_i = (x_i × k) × w_i
// The partial sums are lanes (16 scalars, two 8-lane or one 16-lane register); a row's tail is
// padded with zeros, which leave a sum unchanged. The fold and k are scalar code.
#pragma once

#include <cmath>
#include <cstddef>

namespace activekv::engine::detail {

struct ExpConstants {
  static constexpr float x_min = -104.0f;  // e^x_min rounds to +0
  static constexpr float x_max = 89.0f;    // e^x_max overflows to +inf
  static constexpr float log2e = 1.44269504088896341f;
  static constexpr float round_magic = 12582912.0f;  // 1.5 × 2²³: adding it rounds |v| < 2²² to an integer
  static constexpr float ln2_hi = 0.693359375f;      // ln 2 split so n × ln2_hi is exact for |n| < 2¹⁰
  static constexpr float ln2_lo = -2.12194440e-4f;
  static constexpr float p0 = 1.9875691500e-4f;
  static constexpr float p1 = 1.3981999507e-3f;
  static constexpr float p2 = 8.3334519073e-3f;
  static constexpr float p3 = 4.1665795894e-2f;
  static constexpr float p4 = 1.6666665459e-1f;
  static constexpr float p5 = 5.0000001201e-1f;
};

struct GeluConstants {
  static constexpr float k0 = -1.5957691216057308f;     // −2 √(2/π)
  static constexpr float k1 = -0.071354816272869326f;   // −2 √(2/π) × 0.044715
};

// L::V holds L::width lanes; see the essay above for what each operation must be.
template <typename L>
inline typename L::V exp_lanes(typename L::V x) noexcept {
  using C = ExpConstants;
  const typename L::V c = L::min(L::max(x, L::splat(C::x_min)), L::splat(C::x_max));
  const typename L::V magic = L::splat(C::round_magic);
  const typename L::V n = L::sub(L::add(L::mul(c, L::splat(C::log2e)), magic), magic);
  const typename L::V minus_n = L::sub(L::splat(0.0f), n);
  typename L::V r = L::fma(minus_n, L::splat(C::ln2_hi), c);
  r = L::fma(minus_n, L::splat(C::ln2_lo), r);
  typename L::V p = L::fma(L::splat(C::p0), r, L::splat(C::p1));
  p = L::fma(p, r, L::splat(C::p2));
  p = L::fma(p, r, L::splat(C::p3));
  p = L::fma(p, r, L::splat(C::p4));
  p = L::fma(p, r, L::splat(C::p5));
  const typename L::V e = L::add(L::fma(p, L::mul(r, r), r), L::splat(1.0f));
  return L::keep_nan(x, L::scale_pow2(e, n));
}

template <typename L>
inline typename L::V swiglu_lanes(typename L::V g, typename L::V u) noexcept {
  const typename L::V e = exp_lanes<L>(L::sub(L::splat(0.0f), g));
  return L::mul(L::div(g, L::add(L::splat(1.0f), e)), u);
}

template <typename L>
inline typename L::V gelu_tanh_lanes(typename L::V g, typename L::V u) noexcept {
  using K = GeluConstants;
  const typename L::V z = L::mul(g, L::fma(L::splat(K::k1), L::mul(g, g), L::splat(K::k0)));
  return L::mul(L::div(g, L::add(L::splat(1.0f), exp_lanes<L>(z))), u);
}

// The kinds of elementwise.cpp's activation entry points, as plain data for the per-set files.
enum class ActivationOp : unsigned char { exp, swiglu, gelu_tanh };

// out[i] = op(a[i], b[i]) for i < count (exp reads a only; b may be null). out may be a.
struct ActivationArgs {
  ActivationOp op;
  const float* a;
  const float* b;
  float* out;
  std::size_t count;
};

// The loop every set shares: whole vectors, then the tail through a vector of padding (zeros),
// so the last values take the same lane arithmetic as the rest.
template <typename L>
inline typename L::V activation_apply(ActivationOp op, typename L::V a, typename L::V b) noexcept {
  switch (op) {
    case ActivationOp::exp: return exp_lanes<L>(a);
    case ActivationOp::swiglu: return swiglu_lanes<L>(a, b);
    case ActivationOp::gelu_tanh: return gelu_tanh_lanes<L>(a, b);
  }
  return a;
}

template <typename L, ActivationOp op>
inline void activation_loop(const ActivationArgs& args) noexcept {
  constexpr std::size_t w = L::width;
  const bool binary = op != ActivationOp::exp;
  std::size_t i = 0;
  for (; i + w <= args.count; i += w) {
    const typename L::V b = binary ? L::load(args.b + i) : L::splat(0.0f);
    L::store(args.out + i, activation_apply<L>(op, L::load(args.a + i), b));
  }
  if (i == args.count) return;
  float a_tail[w] = {};
  float b_tail[w] = {};
  const std::size_t tail = args.count - i;
  for (std::size_t j = 0; j < tail; ++j) a_tail[j] = args.a[i + j];
  if (binary)
    for (std::size_t j = 0; j < tail; ++j) b_tail[j] = args.b[i + j];
  L::store(a_tail, activation_apply<L>(op, L::load(a_tail), L::load(b_tail)));
  for (std::size_t j = 0; j < tail; ++j) args.out[i + j] = a_tail[j];
}

template <typename L>
inline void activation_run(const ActivationArgs& args) noexcept {
  switch (args.op) {
    case ActivationOp::exp: activation_loop<L, ActivationOp::exp>(args); return;
    case ActivationOp::swiglu: activation_loop<L, ActivationOp::swiglu>(args); return;
    case ActivationOp::gelu_tanh: activation_loop<L, ActivationOp::gelu_tanh>(args); return;
  }
}

// The 16 partial sums of squares' lanes: how many registers of L hold them.
constexpr std::size_t norm_lanes = 16;

template <typename L>
inline float sum_squares(const float* x, std::size_t n) noexcept {
  constexpr std::size_t w = L::width;
  constexpr std::size_t k = norm_lanes / w;
  static_assert(k * w == norm_lanes, "a lane width divides 16");
  typename L::V acc[k];
  for (std::size_t j = 0; j < k; ++j) acc[j] = L::splat(0.0f);
  std::size_t i = 0;
  for (; i + norm_lanes <= n; i += norm_lanes) {
    for (std::size_t j = 0; j < k; ++j) {
      const typename L::V v = L::load(x + i + j * w);
      acc[j] = L::fma(v, v, acc[j]);
    }
  }
  float sums[norm_lanes] = {};
  if (i < n) {
    for (std::size_t j = 0; i + j < n; ++j) sums[j] = x[i + j];
    for (std::size_t j = 0; j < k; ++j) {
      const typename L::V v = L::load(sums + j * w);
      acc[j] = L::fma(v, v, acc[j]);
    }
  }
  for (std::size_t j = 0; j < k; ++j) L::store(sums + j * w, acc[j]);
  for (std::size_t half = norm_lanes / 2; half >= 1; half /= 2)
    for (std::size_t j = 0; j < half; ++j) sums[j] = sums[j] + sums[j + half];
  return sums[0];
}

// out = x × k × weight, rows × n values; out may be x.
struct NormArgs {
  const float* x;
  const float* weight;
  float* out;
  std::size_t n;     // values per row
  std::size_t rows;
  float epsilon;
};

template <typename L>
inline void norm_run(const NormArgs& args) noexcept {
  constexpr std::size_t w = L::width;
  for (std::size_t r = 0; r < args.rows; ++r) {
    const float* x = args.x + r * args.n;
    float* out = args.out + r * args.n;
    const float k = 1.0f / std::sqrt(sum_squares<L>(x, args.n) / static_cast<float>(args.n) + args.epsilon);
    const typename L::V vk = L::splat(k);
    std::size_t i = 0;
    for (; i + w <= args.n; i += w) L::store(out + i, L::mul(L::mul(L::load(x + i), vk), L::load(args.weight + i)));
    for (; i < args.n; ++i) out[i] = (x[i] * k) * args.weight[i];
  }
}

void activation_portable(const ActivationArgs& args) noexcept;
void activation_avx2(const ActivationArgs& args) noexcept;
void activation_avx512(const ActivationArgs& args) noexcept;
void norm_portable(const NormArgs& args) noexcept;
void norm_avx2(const NormArgs& args) noexcept;
void norm_avx512(const NormArgs& args) noexcept;

}  // namespace activekv::engine::detail
