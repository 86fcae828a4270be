// attention_launch.hpp — the host's handle on the CUDA attention kernels.
//
// Plain C++: the backend (cuda_backend.cpp, built by the host compiler) calls
// these; only attention_launch.cu is built by nvcc. The stream is passed as
// an opaque pointer (a cudaStream_t) and the result is a cudaError_t value,
// so this header never includes a CUDA header.
#pragma once

#include <cstdint>

#include "backends/opencl/attention_pack.hpp"

namespace activekv::cuda {

struct AttentionBuffers {
  const void* arena;
  const void* table;   // the packed parameter block on the device
  const float* q;
  float* out;
  float* state;
  float* pair_ms;
  float* final_ms;
  float* mass;
};

inline constexpr std::uint32_t kAttentionHeadDimMax = 256;  // kernels::kMaxHeadDim

// Enqueues the attention kernel (and the page-mass kernel when the flags ask)
// on `stream`. Returns the launch's cudaError_t as an int (0 = cudaSuccess).
int launch_attention(const gpu::PackedParams& params, const AttentionBuffers& buffers, void* stream);

}  // namespace activekv::cuda
