// attention.cuh — exact paged attention in CUDA: device code only.
//
// The same math as src/backends/opencl/attention.cl and DESIGN.md's layout
// contract, laid out for a warp:
//
//   attention  one warp per (query row, q_head). Lane l owns head dimensions
//              d = l, l + 32, ... (head_dim ≤ kMaxHeadDim), so q, the running
//              accumulator and the page accumulator live in registers. A dot
//              product is the lanes' partial sums reduced by a fixed xor
//              butterfly: deterministic, the same for a page wherever its bytes
//              live. Per page: pass 1 the maximum m_p of the visible scores,
//              pass 2 s_p = Σ exp(score − m_p) and acc_p = Σ exp(score − m_p)·v
//              in ascending token order (K/V widened to fp32 first); then the
//              partial is merged into the running state in ascending page order.
//   page_mass  one thread per page: its share of softmax mass over the task's
//              (query, head) pairs, summed in a fixed order.
//
// Parameters: gpu::PackedParams (../opencl/attention_pack.hpp) by value, and
// the packed table (its uint arrays at the PackedParams word offsets). Shapes:
//   q, out   [queries][q_heads][head_dim]           fp32
//   state    [queries][q_heads][2 + head_dim]       m, s, acc
//   pair_ms  [Σ query_count·q_heads·page_count][2]  m_p, s_p
//   final_ms [queries][q_heads][2]                  the pair's final m, s
//   mass     [pages]
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/opencl/attention_pack.hpp"

namespace activekv::cuda::kernels {

inline constexpr unsigned kWarp = 32;
inline constexpr unsigned kMaxHeadDim = 256;
inline constexpr unsigned kLaneDims = kMaxHeadDim / kWarp;
inline constexpr unsigned kWarpsPerBlock = 4;

struct Buffers {
  const unsigned char* arena;
  const std::uint64_t* table;  // page offsets first; uint arrays follow
  const float* q;
  float* out;
  float* state;
  float* pair_ms;
  float* final_ms;
  float* mass;
};

// Element codes follow activekv::DType: 0 f32, 1 f16, 2 bf16.
__device__ __forceinline__ float load_element(const unsigned char* base, std::uint64_t element, unsigned dtype) {
  if (dtype == 1u) return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(base + element * 2u)));
  if (dtype == 2u) return __uint_as_float(static_cast<unsigned>(*reinterpret_cast<const unsigned short*>(base + element * 2u)) << 16);
  return *reinterpret_cast<const float*>(base + element * 4u);
}

__device__ __forceinline__ float warp_sum(float value) {
  for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__global__ void attention(gpu::PackedParams a, Buffers b) {
  const std::uint64_t item = (static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const unsigned lane = threadIdx.x % kWarp;
  if (item >= static_cast<std::uint64_t>(a.queries) * a.q_heads) return;  // whole warps leave together
  const auto qi = static_cast<std::uint32_t>(item / a.q_heads);
  const auto head = static_cast<std::uint32_t>(item % a.q_heads);
  const auto* words = reinterpret_cast<const std::uint32_t*>(b.table);
  const std::uint32_t task = words[a.off_query_task + qi];
  if (task >= a.tasks) return;  // a row no task owns
  const std::uint32_t position = words[a.off_positions + qi];
  const std::uint32_t page_begin = words[a.off_task_page_begin + task];
  const std::uint32_t page_count = words[a.off_task_page_count + task];
  const std::uint32_t query_begin = words[a.off_task_query_begin + task];
  const std::uint32_t mass_first = words[a.off_task_mass_first + task];

  const std::uint32_t kv_head = head / (a.q_heads / a.kv_heads);
  const std::uint64_t row_elements = 2ull * a.kv_heads * a.head_dim;
  const std::uint64_t k_first = static_cast<std::uint64_t>(kv_head) * a.head_dim;
  const std::uint64_t v_first = static_cast<std::uint64_t>(a.kv_heads) * a.head_dim + k_first;

  float q[kLaneDims], acc[kLaneDims], acc_p[kLaneDims];
#pragma unroll
  for (unsigned i = 0; i < kLaneDims; ++i) {
    const unsigned d = lane + i * kWarp;
    q[i] = d < a.head_dim ? b.q[item * a.head_dim + d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, s = 0.0f;
  if ((a.flags & gpu::kLoadState) != 0u) {
    const float* st = b.state + item * (2ull + a.head_dim);
    m = st[0];
    s = st[1];
#pragma unroll
    for (unsigned i = 0; i < kLaneDims; ++i) {
      const unsigned d = lane + i * kWarp;
      if (d < a.head_dim) acc[i] = st[2 + d];
    }
  }

  for (std::uint32_t p = 0; p < page_count; ++p) {
    const std::uint32_t page = page_begin + p;
    const std::uint32_t first_token = words[a.off_page_first + page];
    std::uint32_t visible = 0;
    if (position >= first_token) visible = min(words[a.off_page_tokens + page], position - first_token + 1u);
    if (((words[a.off_page_heads + page] >> kv_head) & 1u) == 0u) visible = 0;  // not this head's page (page_heads)
    const unsigned char* base = b.arena + b.table[page];

    float m_p = -INFINITY;
    for (std::uint32_t r = 0; r < visible; ++r) {
      float part = 0.0f;
#pragma unroll
      for (unsigned i = 0; i < kLaneDims; ++i) {
        const unsigned d = lane + i * kWarp;
        if (d < a.head_dim) part += q[i] * load_element(base, r * row_elements + k_first + d, a.dtype);
      }
      m_p = fmaxf(m_p, warp_sum(part) * a.scale);
    }
    float s_p = 0.0f;
#pragma unroll
    for (unsigned i = 0; i < kLaneDims; ++i) acc_p[i] = 0.0f;
    for (std::uint32_t r = 0; r < visible; ++r) {
      float part = 0.0f;
#pragma unroll
      for (unsigned i = 0; i < kLaneDims; ++i) {
        const unsigned d = lane + i * kWarp;
        if (d < a.head_dim) part += q[i] * load_element(base, r * row_elements + k_first + d, a.dtype);
      }
      const float w = expf(warp_sum(part) * a.scale - m_p);
      s_p += w;
#pragma unroll
      for (unsigned i = 0; i < kLaneDims; ++i) {
        const unsigned d = lane + i * kWarp;
        if (d < a.head_dim) acc_p[i] += w * load_element(base, r * row_elements + v_first + d, a.dtype);
      }
    }
    if ((a.flags & gpu::kPageMass) != 0u && lane == 0) {
      float* ms = b.pair_ms + 2ull * (mass_first + (static_cast<std::uint64_t>(qi - query_begin) * a.q_heads + head) * page_count + p);
      ms[0] = m_p;
      ms[1] = s_p;
    }
    if (s_p == 0.0f) continue;  // no visible token in this page
    const float mm = fmaxf(m, m_p);
    const float x = (s == 0.0f) ? 0.0f : expf(m - mm);
    const float y = expf(m_p - mm);
    s = s * x + s_p * y;
#pragma unroll
    for (unsigned i = 0; i < kLaneDims; ++i) acc[i] = acc[i] * x + acc_p[i] * y;
    m = mm;
  }

  if ((a.flags & gpu::kStoreState) != 0u) {
    float* st = b.state + item * (2ull + a.head_dim);
    if (lane == 0) {
      st[0] = m;
      st[1] = s;
    }
#pragma unroll
    for (unsigned i = 0; i < kLaneDims; ++i) {
      const unsigned d = lane + i * kWarp;
      if (d < a.head_dim) st[2 + d] = acc[i];
    }
  }
  if ((a.flags & gpu::kWriteOutput) != 0u) {
#pragma unroll
    for (unsigned i = 0; i < kLaneDims; ++i) {
      const unsigned d = lane + i * kWarp;
      if (d < a.head_dim) b.out[item * a.head_dim + d] = (s == 0.0f) ? 0.0f : acc[i] / s;
    }
  }
  if ((a.flags & gpu::kPageMass) != 0u && lane == 0) {
    b.final_ms[2 * item] = m;
    b.final_ms[2 * item + 1] = s;
  }
}

__global__ void page_mass(gpu::PackedParams a, Buffers b) {
  const std::uint64_t page = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (page >= a.pages) return;
  const auto* words = reinterpret_cast<const std::uint32_t*>(b.table);
  const std::uint32_t task = words[a.off_page_task + page];
  if (task >= a.tasks) {  // a page no task names
    b.mass[page] = 0.0f;
    return;
  }
  const std::uint32_t page_begin = words[a.off_task_page_begin + task];
  const std::uint32_t page_count = words[a.off_task_page_count + task];
  const std::uint32_t query_begin = words[a.off_task_query_begin + task];
  const std::uint32_t query_count = words[a.off_task_query_count + task];
  const std::uint32_t mass_first = words[a.off_task_mass_first + task];
  const std::uint64_t i = page - page_begin;
  float sum = 0.0f;
  for (std::uint32_t k = 0; k < query_count; ++k) {
    for (std::uint32_t head = 0; head < a.q_heads; ++head) {
      const std::uint64_t pair = static_cast<std::uint64_t>(query_begin + k) * a.q_heads + head;
      const float fm = b.final_ms[2 * pair], fs = b.final_ms[2 * pair + 1];
      const float* ms = b.pair_ms + 2ull * (mass_first + (static_cast<std::uint64_t>(k) * a.q_heads + head) * page_count + i);
      if (fs == 0.0f || ms[1] == 0.0f) continue;
      sum += ms[1] * expf(ms[0] - fm) / fs;
    }
  }
  const std::uint32_t pairs = query_count * a.q_heads;
  b.mass[page] = pairs == 0 ? 0.0f : sum / static_cast<float>(pairs);
}

}  // namespace activekv::cuda::kernels
