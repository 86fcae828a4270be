// huge_pages.hpp — asking the kernel for 2 MiB pages under the large host buffers the hot loops walk.
//
// The KV history (host pool), the emulated device's arena and the page summaries are hundreds of
// MiB that a decode step reads in scattered pieces: a sparse step reads one KV head's 256 B of a
// row in ~170 pages per layer, a page's 12 KiB spanning three 4 KiB pages. With 4 KiB pages every
// such page costs a TLB miss, and under a hypervisor (nested paging) a miss is a walk of up to 24
// memory reads. Transparent huge pages (2 MiB) cover a page pool with ~500× fewer entries.
//
// Advice only: it never changes a byte of the buffer or what any computation reads, and a kernel
// that declines (THP "never", no free 2 MiB frames, no MADV_COLLAPSE) leaves 4 KiB pages. Only
// the 2 MiB-aligned interior of a buffer is advised. ACTIVEKV_HUGE_PAGES=off turns the advice off
// (for same-binary measurements of what it buys; docs/BENCHMARKS.md).
#pragma once

#include <cstdint>

namespace activekv {

inline constexpr std::uint64_t huge_page_bytes = 2ull << 20;  // x86-64's PMD page
// Smaller buffers are not advised: on a machine whose free memory is fragmented, the first 2 MiB
// faults of a process compact memory (THP defrag "madvise"), which costs more at start-up than a
// small buffer's TLB misses cost in its lifetime (docs/BENCHMARKS.md, "Huge pages under the KV
// memory").
inline constexpr std::uint64_t huge_page_least = 64ull << 20;

// Whether the advice is on (ACTIVEKV_HUGE_PAGES is not "off"); read once per process.
bool huge_pages_enabled() noexcept;

// For memory not yet touched: MADV_HUGEPAGE over the aligned interior, so first touches fault in
// 2 MiB pages. Returns the bytes advised (0 when off, too small, or refused).
std::uint64_t advise_huge_pages(void* data, std::uint64_t bytes) noexcept;

// For memory already populated: MADV_HUGEPAGE, then MADV_COLLAPSE (Linux 6.1+) to rebuild the
// aligned interior as 2 MiB pages now, in place (the bytes are copied by the kernel, unchanged).
// Returns the bytes collapsed (0 when off, too small, or refused).
std::uint64_t collapse_huge_pages(void* data, std::uint64_t bytes) noexcept;

}  // namespace activekv
