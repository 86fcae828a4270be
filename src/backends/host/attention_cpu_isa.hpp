// attention_cpu_isa.hpp — the kernel builds attention_cpu.cpp chooses between.
//
// Each is the body of attention_cpu_kernel.hpp compiled with one instruction
// set's inner loops; both run units [unit_begin, unit_end) of a job.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/host/attention_cpu.hpp"

namespace activekv::host {

namespace portable {
void run_units(const std::byte* arena, const AttentionJob& job, std::uint32_t unit_begin, std::uint32_t unit_end,
               AttentionScratch& scratch, AttentionSplit* split);
void finish_split(const AttentionJob& job, AttentionSplit& split, float* mass);
void widen(const std::byte* src, DType dtype, std::uint32_t n, float* dst);
}  // namespace portable

namespace avx2 {
// Present where the compiler targets x86-64 (ACTIVEKV_HAVE_AVX2_KERNEL).
void run_units(const std::byte* arena, const AttentionJob& job, std::uint32_t unit_begin, std::uint32_t unit_end,
               AttentionScratch& scratch, AttentionSplit* split);
void finish_split(const AttentionJob& job, AttentionSplit& split, float* mass);
}  // namespace avx2

}  // namespace activekv::host
