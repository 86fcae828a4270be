// attention_launch.cu — grid shapes for the kernels in attention.cuh.
#include "backends/cuda/attention_launch.hpp"

#include <cuda_runtime.h>

#include "backends/cuda/attention.cuh"

namespace activekv::cuda {

static_assert(kAttentionHeadDimMax == kernels::kMaxHeadDim, "the launcher's head_dim limit must be the kernel's");

int launch_attention(const gpu::PackedParams& params, const AttentionBuffers& buffers, void* stream_opaque) {
  auto stream = static_cast<cudaStream_t>(stream_opaque);
  const kernels::Buffers b{static_cast<const unsigned char*>(buffers.arena),
                           static_cast<const std::uint64_t*>(buffers.table),
                           buffers.q, buffers.out, buffers.state, buffers.pair_ms, buffers.final_ms, buffers.mass};
  const std::uint64_t warps = static_cast<std::uint64_t>(params.queries) * params.q_heads;
  const unsigned threads = kernels::kWarp * kernels::kWarpsPerBlock;
  const auto blocks = static_cast<unsigned>((warps + kernels::kWarpsPerBlock - 1) / kernels::kWarpsPerBlock);
  kernels::attention<<<blocks, threads, 0, stream>>>(params, b);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess || (params.flags & gpu::kPageMass) == 0u) return static_cast<int>(status);
  const unsigned mass_threads = 128;
  const unsigned mass_blocks = (params.pages + mass_threads - 1) / mass_threads;
  kernels::page_mass<<<mass_blocks, mass_threads, 0, stream>>>(params, b);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace activekv::cuda
