// elementwise.cpp — the elementwise kernels' choice and the portable path (see elementwise.hpp).
// Compiled with -ffp-contract=off: the lane sequence (elementwise_lanes.hpp) keeps every
// product apart from the sum after it unless it names an fma.
#include "engine/elementwise.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

#include "activekv/assert.hpp"
#include "engine/elementwise_lanes.hpp"

namespace activekv::engine {
namespace detail {
namespace {

// One lane: each operation as elementwise_lanes.hpp defines it.
struct ScalarLanes {
  using V = float;
  static constexpr std::size_t width = 1;
  static V load(const float* p) noexcept { return *p; }
  static void store(float* p, V v) noexcept { *p = v; }
  static V splat(float v) noexcept { return v; }
  static V add(V a, V b) noexcept { return a + b; }
  static V sub(V a, V b) noexcept { return a - b; }
  static V mul(V a, V b) noexcept { return a * b; }
  static V div(V a, V b) noexcept { return a / b; }
  static V fma(V a, V b, V c) noexcept { return std::fma(a, b, c); }
  static V min(V a, V b) noexcept { return a < b ? a : b; }
  static V max(V a, V b) noexcept { return a > b ? a : b; }
  static V keep_nan(V x, V y) noexcept { return std::isnan(x) ? x : y; }
  static V pow2(std::int32_t k) noexcept { return std::bit_cast<float>(static_cast<std::uint32_t>(k + 127) << 23); }
  // (e × 2^⌊n/2⌋) × 2^(n − ⌊n/2⌋), n integral with |n| ≤ 151.
  static V scale_pow2(V e, V n) noexcept {
    const auto k = static_cast<std::int32_t>(n);
    const std::int32_t k1 = k >> 1;
    return (e * pow2(k1)) * pow2(k - k1);
  }
};

}  // namespace

void activation_portable(const ActivationArgs& args) noexcept { activation_run<ScalarLanes>(args); }
void norm_portable(const NormArgs& args) noexcept { norm_run<ScalarLanes>(args); }

}  // namespace detail

namespace {

// fn(portable, avx2, avx512): the call for `isa`.
template <typename Args>
void run(Isa isa, const Args& args, void (*portable)(const Args&) noexcept, void (*avx2)(const Args&) noexcept,
         void (*avx512)(const Args&) noexcept) noexcept {
  AK_ASSERT(isa_available(isa), "elementwise: instruction set not available on this CPU");
  switch (isa) {
    case Isa::portable: portable(args); return;
    case Isa::avx2: avx2(args); return;
    case Isa::avx512: avx512(args); return;
  }
}

void run(Isa isa, const detail::ActivationArgs& args) noexcept {
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  run(isa, args, detail::activation_portable, detail::activation_avx2, detail::activation_avx512);
#else
  run(isa, args, detail::activation_portable, detail::activation_portable, detail::activation_portable);
#endif
}

detail::ActivationOp op_of(FfnKind kind) noexcept {
  switch (kind) {
    case FfnKind::swiglu: return detail::ActivationOp::swiglu;
    case FfnKind::geglu_tanh: return detail::ActivationOp::gelu_tanh;
  }
  return detail::ActivationOp::swiglu;
}

}  // namespace

void exp_values(Isa isa, const float* x, float* y, std::size_t count) noexcept {
  run(isa, detail::ActivationArgs{detail::ActivationOp::exp, x, nullptr, y, count});
}

void activate_values(Isa isa, FfnKind kind, float* gate, const float* up, std::size_t count) noexcept {
  run(isa, detail::ActivationArgs{op_of(kind), gate, up, gate, count});
}

void rms_norm_rows(Isa isa, const float* x, const float* weight, float* out, std::size_t width, std::size_t rows,
                   float epsilon) noexcept {
  const detail::NormArgs args{x, weight, out, width, rows, epsilon};
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  run(isa, args, detail::norm_portable, detail::norm_avx2, detail::norm_avx512);
#else
  run(isa, args, detail::norm_portable, detail::norm_portable, detail::norm_portable);
#endif
}

}  // namespace activekv::engine
