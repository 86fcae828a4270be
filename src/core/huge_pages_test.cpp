// huge_pages_test.cpp — the huge-page advice covers exactly a buffer's aligned interior and never
// changes a byte; a pinned region of a huge page or more starts on a huge page boundary.
#include "activekv/huge_pages.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "activekv/pinned_memory.hpp"

namespace activekv {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

// Whole huge pages inside [data, data + bytes).
std::uint64_t interior_bytes(const void* data, std::uint64_t bytes) {
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t begin = (first + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  const std::uintptr_t end = (first + bytes) / huge_page_bytes * huge_page_bytes;
  return end > begin ? end - begin : 0;
}

TEST(HugePages, CollapsingKeepsEveryByteAndCoversOnlyTheAlignedInterior) {
  // A buffer that starts 4 KiB past a huge page boundary: its interior is one huge page short.
  const std::uint64_t total = 80 * MiB;
  auto* block = static_cast<std::uint8_t*>(std::aligned_alloc(huge_page_bytes, total));
  ASSERT_NE(block, nullptr);
  std::uint8_t* data = block + 4096;
  const std::uint64_t bytes = 72 * MiB;
  for (std::uint64_t i = 0; i + 8 <= bytes; i += 8) {  // a pattern no page of which repeats another's
    const std::uint64_t word = i * 0x9e3779b97f4a7c15ull;
    std::memcpy(data + i, &word, 8);
  }
  std::vector<std::uint8_t> before(data, data + bytes);
  const std::uint64_t collapsed = collapse_huge_pages(data, bytes);
  // The kernel may decline (no THP, no MADV_COLLAPSE, no free 2 MiB frames): then nothing.
  EXPECT_TRUE(collapsed == 0 || collapsed == interior_bytes(data, bytes)) << collapsed;
  EXPECT_EQ(interior_bytes(data, bytes), 70 * MiB);
  EXPECT_EQ(std::memcmp(before.data(), data, bytes), 0) << "the advice changed a byte";
  const std::uint64_t advised = advise_huge_pages(data, bytes);
  EXPECT_TRUE(advised == 0 || advised == 70 * MiB) << advised;
  EXPECT_EQ(std::memcmp(before.data(), data, bytes), 0);
  // Below a huge page, or no buffer: never advised.
  EXPECT_EQ(advise_huge_pages(data, huge_page_least - 1), 0u);
  EXPECT_EQ(collapse_huge_pages(data, 8 * MiB), 0u);
  EXPECT_EQ(advise_huge_pages(nullptr, 72 * MiB), 0u);
  std::free(block);
}

TEST(HugePages, APinnedRegionOfAHugePageOrMoreStartsOnAHugePageBoundaryZeroed) {
  for (const std::uint64_t bytes : {huge_page_least + 12345, huge_page_least - 4096, 1 * MiB}) {
    auto region = PinnedRegion::map(bytes, "--host-pool");
    if (!region.ok()) GTEST_SKIP() << "cannot pin here: " << region.error().message;
    const auto at = reinterpret_cast<std::uintptr_t>(region.value().data());
    if (huge_pages_enabled() && bytes >= huge_page_least) {
      EXPECT_EQ(at % huge_page_bytes, 0u) << bytes;
    } else {
      EXPECT_EQ(at % 4096, 0u) << bytes;
    }
    std::byte* p = region.value().data();
    bool zero = true;
    for (std::uint64_t i = 0; i < bytes; i += 4093) zero = zero && p[i] == std::byte{0};
    EXPECT_TRUE(zero && p[bytes - 1] == std::byte{0}) << bytes;
    std::memset(p, 0x5a, bytes);  // every byte writable (the trimmed head and tail are not part of it)
    EXPECT_EQ(p[bytes - 1], std::byte{0x5a});
  }
}

}  // namespace
}  // namespace activekv
