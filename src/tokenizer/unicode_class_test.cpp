// unicode_class_test.cpp — classes of the pre-tokenizer pattern, UTF-8 decoding
// (maximal subparts), and the GPT-2 byte map.
#include <gtest/gtest.h>

#include <set>

#include "tokenizer/byte_level.hpp"
#include "tokenizer/unicode_class.hpp"

namespace activekv::tokenizer {
namespace {

TEST(UnicodeClass, ClassifiesLettersNumbersSpaceAndOther) {
  EXPECT_EQ(classify(U'a'), CharClass::letter);
  EXPECT_EQ(classify(U'Z'), CharClass::letter);
  EXPECT_EQ(classify(U'é'), CharClass::letter);
  EXPECT_EQ(classify(U'ß'), CharClass::letter);
  EXPECT_EQ(classify(U'Ж'), CharClass::letter);
  EXPECT_EQ(classify(U'中'), CharClass::letter);   // Lo
  EXPECT_EQ(classify(U'ー'), CharClass::letter);   // Lm
  EXPECT_EQ(classify(U'ǅ'), CharClass::letter);   // Lt
  EXPECT_EQ(classify(U'7'), CharClass::number);
  EXPECT_EQ(classify(U'½'), CharClass::number);   // No
  EXPECT_EQ(classify(U'²'), CharClass::number);   // No
  EXPECT_EQ(classify(U'٣'), CharClass::number);   // Nd
  EXPECT_EQ(classify(U'Ⅻ'), CharClass::number);   // Nl
  EXPECT_EQ(classify(U' '), CharClass::space);
  EXPECT_EQ(classify(U'\t'), CharClass::space);
  EXPECT_EQ(classify(U'\n'), CharClass::space);
  EXPECT_EQ(classify(0x85), CharClass::space);
  EXPECT_EQ(classify(0xA0), CharClass::space);
  EXPECT_EQ(classify(0x3000), CharClass::space);
  EXPECT_EQ(classify(0x2009), CharClass::space);
  EXPECT_EQ(classify(0x1C), CharClass::other);     // Python's isspace says yes; \s says no
  EXPECT_EQ(classify(0x180E), CharClass::other);
  EXPECT_EQ(classify(0x200B), CharClass::other);
  EXPECT_EQ(classify(U'\''), CharClass::other);
  EXPECT_EQ(classify(U'!'), CharClass::other);
  EXPECT_EQ(classify(0x1F600), CharClass::other);  // 😀
  EXPECT_EQ(classify(0x0301), CharClass::other);   // combining acute: Mn
  EXPECT_EQ(classify(0x10FFFF), CharClass::other);
}

TEST(UnicodeClass, TablesAreSortedAndDisjoint) {
  using Table = std::pair<const detail::CodePointRange*, std::size_t>;
  for (const auto& [ranges, count] : {Table{detail::kLetterRanges, detail::kLetterRanges_count},
                                      Table{detail::kNumberRanges, detail::kNumberRanges_count}}) {
    ASSERT_GT(count, 100u);
    for (std::size_t i = 0; i < count; ++i) {
      EXPECT_LE(ranges[i].first, ranges[i].last);
      if (i > 0) {
        EXPECT_GT(ranges[i].first, ranges[i - 1].last + 1) << "ranges must be merged and sorted";
      }
    }
  }
}

TEST(Utf8, EveryScalarValueRoundTrips) {
  char buffer[4];
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const std::size_t n = encode_utf8(c, buffer);
    char32_t back = 0;
    ASSERT_EQ(decode_utf8(std::string_view(buffer, n), 0, back), n) << static_cast<std::uint32_t>(c);
    ASSERT_EQ(static_cast<std::uint32_t>(back), static_cast<std::uint32_t>(c));
  }
}

TEST(Utf8, IllFormedBytesDecodeAsMaximalSubparts) {
  char32_t c = 0;
  EXPECT_EQ(decode_utf8("\x80", 0, c), 1u);
  EXPECT_EQ(static_cast<std::uint32_t>(c), 0xFFFDu);
  EXPECT_EQ(decode_utf8("\xE4\xB8", 0, c), 2u);  // truncated 3-byte character
  EXPECT_EQ(static_cast<std::uint32_t>(c), 0xFFFDu);
  EXPECT_EQ(decode_utf8("\xE4\xB8x", 0, c), 2u);
  EXPECT_EQ(decode_utf8("\xC0\xAF", 0, c), 1u);  // overlong
  EXPECT_EQ(decode_utf8("\xE0\x80\xAF", 0, c), 1u);
  EXPECT_EQ(decode_utf8("\xED\xA0\x80", 0, c), 1u);  // surrogate
  EXPECT_EQ(decode_utf8("\xF4\x90\x80\x80", 0, c), 1u);  // past U+10FFFF
  EXPECT_EQ(decode_utf8("\xF0\x9F\x98", 0, c), 3u);  // 😀 cut short
  EXPECT_EQ(decode_utf8("\xFF", 0, c), 1u);
  EXPECT_EQ(decode_utf8("\xF0\x9F\x98\x80", 0, c), 4u);
  EXPECT_EQ(static_cast<std::uint32_t>(c), 0x1F600u);
}

TEST(ByteLevel, IsABijectionOntoPrintableCodePoints) {
  std::set<char32_t> seen;
  for (unsigned b = 0; b < 256; ++b) {
    const char32_t c = byte_to_code_point(static_cast<std::uint8_t>(b));
    EXPECT_TRUE(seen.insert(c).second);
    EXPECT_EQ(code_point_to_byte(c), static_cast<int>(b));
    EXPECT_NE(classify(c), CharClass::space) << "byte " << b;
  }
  EXPECT_EQ(static_cast<std::uint32_t>(byte_to_code_point(' ')), 0x120u);   // Ġ
  EXPECT_EQ(static_cast<std::uint32_t>(byte_to_code_point('\n')), 0x10Au);  // Ċ
  EXPECT_EQ(static_cast<std::uint32_t>(byte_to_code_point('A')), 0x41u);
  EXPECT_EQ(code_point_to_byte(0x144), -1);
  EXPECT_EQ(code_point_to_byte(U'中'), -1);
  std::string out;
  EXPECT_TRUE(decode_byte_level("\xC4\xA0the\xC4\x8A", out));
  EXPECT_EQ(out, " the\n");
  EXPECT_FALSE(decode_byte_level("a\xE4\xB8\xAD", out)) << "中 is not a byte-level character";
  EXPECT_EQ(out, " the\n") << "a refused decode leaves the output unchanged";
}

}  // namespace
}  // namespace activekv::tokenizer
