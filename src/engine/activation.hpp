// activation.hpp — exp and the FFN's gated activations over arrays of floats, on the best
// instruction set the CPU has, with the same bits on every one.
//
//   exp_values(isa, x, y, n)              y[i] = exp(x[i])
//   activate_values(isa, kind, g, u, n)   g[i] = act(g[i]) × u[i]   SwiGLU: silu; GELU(tanh): gelu_tanh
//
// The arithmetic (activation_lanes.hpp) is one fixed sequence of fma, mul, add and div per
// value that the portable path replays with std::fma, so an output bit depends on its own
// input alone: not on the instruction set, the count, or where an array was split between
// threads. exp is within 1 ulp of e^x down to FLT_MIN (activation_test.cpp checks it);
// NaN in gives NaN out (its payload is not promised).
// Kernels: activation.cpp (choice and the portable path), activation_avx2.cpp (8 lanes),
// activation_avx512.cpp (16 lanes).
#pragma once

#include <cstddef>

#include "engine/arch.hpp"
#include "engine/matmul.hpp"

namespace activekv::engine {

void exp_values(Isa isa, const float* x, float* y, std::size_t count) noexcept;
// gate[i] = act(gate[i]) × up[i] for i < count.
void activate_values(Isa isa, FfnKind kind, float* gate, const float* up, std::size_t count) noexcept;

}  // namespace activekv::engine
