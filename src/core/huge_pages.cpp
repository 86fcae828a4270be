// huge_pages.cpp — madvise(MADV_HUGEPAGE) and MADV_COLLAPSE over a buffer's 2 MiB-aligned interior
// (include/activekv/huge_pages.hpp: why, and why it is advice only).
#include "activekv/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace activekv {

namespace {

#ifndef MADV_COLLAPSE
constexpr int madv_collapse = 25;  // Linux 6.1's value, for headers that predate it
#else
constexpr int madv_collapse = MADV_COLLAPSE;
#endif

struct Interior {
  void* begin = nullptr;
  std::uint64_t bytes = 0;
};

// The whole huge pages inside [data, data + bytes).
Interior interior(void* data, std::uint64_t bytes) noexcept {
  if (data == nullptr || bytes < huge_page_least) return {};
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t begin = (first + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  const std::uintptr_t end = (first + bytes) / huge_page_bytes * huge_page_bytes;
  if (end <= begin) return {};
  return {reinterpret_cast<void*>(begin), end - begin};
}

}  // namespace

bool huge_pages_enabled() noexcept {
  static const bool enabled = [] {
    const char* setting = std::getenv("ACTIVEKV_HUGE_PAGES");
    return setting == nullptr || std::strcmp(setting, "off") != 0;
  }();
  return enabled;
}

std::uint64_t advise_huge_pages(void* data, std::uint64_t bytes) noexcept {
  if (!huge_pages_enabled()) return 0;
  const Interior in = interior(data, bytes);
  if (in.bytes == 0 || madvise(in.begin, in.bytes, MADV_HUGEPAGE) != 0) return 0;
  return in.bytes;
}

std::uint64_t collapse_huge_pages(void* data, std::uint64_t bytes) noexcept {
  if (!huge_pages_enabled()) return 0;
  const Interior in = interior(data, bytes);
  if (in.bytes == 0) return 0;
  (void)madvise(in.begin, in.bytes, MADV_HUGEPAGE);  // keeps khugepaged's later collapses too
  if (madvise(in.begin, in.bytes, madv_collapse) != 0) return 0;
  return in.bytes;
}

}  // namespace activekv
