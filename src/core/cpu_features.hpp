// cpu_features.hpp — the x86 extensions a kernel choice asks about at run time that not every
// supported compiler's __builtin_cpu_supports names (clang 14 has no "f16c"; AVX512_VNNI likewise): asked through CPUID
// here, so g++ and clang++ builds choose the same kernels. Callers pair F16C with an AVX or AVX2
// check, which also confirms the OS saves the YMM registers.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace activekv {

// True where CPUID leaf 1 reports F16C (half ⇄ float conversions, 8 lanes).
inline bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

// True where CPUID leaf 7 reports AVX512_VNNI (vpdpwssd and the other fused integer dot products). Callers pair
// it with the AVX-512 F/BW/VL check, which also confirms the OS saves the ZMM registers.
inline bool cpu_has_avx512_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 11)) != 0;
#else
  return false;
#endif
}

}  // namespace activekv
