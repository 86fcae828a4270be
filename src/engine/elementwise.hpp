// elementwise.hpp — the layer blocks' per-value arithmetic over arrays of floats (exp, the
// FFN's gated activations, RMS norm), on the best instruction set the CPU has, with the same
// bits on every one.
//
//   exp_values(isa, x, y, n)                   y[i] = exp(x[i])
//   activate_values(isa, kind, g, u, n)        g[i] = act(g[i]) × u[i]   SwiGLU: silu; GELU(tanh): gelu_tanh
//   rms_norm_rows(isa, x, w, out, n, rows, e)  out = x / sqrt(mean(x²) + e) ⊙ w, row by row
//
// The arithmetic (elementwise_lanes.hpp) is one fixed sequence of fma, mul, add and div per
// value (per row for the norm's sum of squares: 16 partial sums folded in halves) that the
// portable path replays with std::fma, so an output bit depends on its own input (row) alone:
// not on the instruction set, the count, or where an array was split between threads. exp is
// within 1.02 ulp of e^x down to FLT_MIN (elementwise_test.cpp checks it, over every float with
// ACTIVEKV_LONG=1); NaN in gives NaN out (its payload is not promised for the activations).
// Kernels: elementwise.cpp (choice and the portable path), elementwise_avx2.cpp (8 lanes),
// elementwise_avx512.cpp (16 lanes).
#pragma once

#include <cstddef>

#include "engine/arch.hpp"
#include "engine/matmul.hpp"

namespace activekv::engine {

void exp_values(Isa isa, const float* x, float* y, std::size_t count) noexcept;
// gate[i] = act(gate[i]) × up[i] for i < count.
void activate_values(Isa isa, FfnKind kind, float* gate, const float* up, std::size_t count) noexcept;
// out = rows × width values, each row of x normalised and multiplied by weight; out may be x.
void rms_norm_rows(Isa isa, const float* x, const float* weight, float* out, std::size_t width, std::size_t rows,
                   float epsilon) noexcept;

}  // namespace activekv::engine
