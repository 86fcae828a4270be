// size_test.cpp — sizes with units parse exactly; bad sizes are refused by name.
#include "activekv/size.hpp"

#include <gtest/gtest.h>

namespace activekv {
namespace {

TEST(Size, ParsesUnits) {
  EXPECT_EQ(parse_size("768", "--x").value(), 768u);
  EXPECT_EQ(parse_size("48KiB", "--x").value(), 48u * KiB);
  EXPECT_EQ(parse_size("12GiB", "--x").value(), 12u * GiB);
  EXPECT_EQ(parse_size("12 gb", "--x").value(), 12u * GiB);
  EXPECT_EQ(parse_size("1.5GiB", "--x").value(), GiB + GiB / 2);
  EXPECT_EQ(parse_size("64M", "--x").value(), 64u * MiB);
}

TEST(Size, RefusesBadSizesNamingTheSetting) {
  for (const char* bad : {"", "0", "-1", "+5", "auto", "12XB", "1.", "0.3B", "99999999999999999999", "16777216TiB"}) {
    const auto r = parse_size(bad, "--host-pool");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().setting, "--host-pool") << bad;
    EXPECT_NE(r.error().message.find("12GiB"), std::string::npos) << bad;
  }
  EXPECT_EQ(parse_size("0", "--x", /*zero_allowed=*/true).value(), 0u);
}

TEST(Size, Formats) {
  EXPECT_EQ(format_bytes(128 * MiB), "128 MiB");
  EXPECT_EQ(format_bytes(2 * GiB), "2 GiB");
  EXPECT_EQ(format_bytes(768), "768 B");
  EXPECT_EQ(format_bytes(GiB + GiB / 2), "1.50 GiB");
}

TEST(Size, CountsRefuseSignsAndUnits) {
  EXPECT_EQ(parse_count("32768", "--max-context").value(), 32768u);
  EXPECT_FALSE(parse_count("-1", "--max-seqs").ok());
  EXPECT_FALSE(parse_count("4k", "--max-seqs").ok());
}

}  // namespace
}  // namespace activekv
