// unicode_class.cpp — classification by table lookup (see unicode_class.hpp).
//
// ASCII, which dominates most text, is answered from a 128-entry table built at
// compile time; everything else by binary search over the generated ranges
// (648 letter ranges, 134 number ranges: at most ten probes each).
#include "tokenizer/unicode_class.hpp"

#include <algorithm>
#include <array>

#include "activekv/assert.hpp"

namespace activekv::tokenizer {
namespace {

bool is_white_space(char32_t c) noexcept {
  // Unicode White_Space: what Oniguruma's \s matches for Unicode strings.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

constexpr std::array<CharClass, 128> make_ascii_table() {
  std::array<CharClass, 128> table{};
  for (std::size_t c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      table[c] = CharClass::letter;
    } else if (c >= '0' && c <= '9') {
      table[c] = CharClass::number;
    } else if ((c >= 0x09 && c <= 0x0D) || c == 0x20) {
      table[c] = CharClass::space;
    } else {
      table[c] = CharClass::other;
    }
  }
  return table;
}
constexpr std::array<CharClass, 128> kAscii = make_ascii_table();

bool in_ranges(const detail::CodePointRange* ranges, std::size_t count, char32_t c) noexcept {
  const detail::CodePointRange* end = ranges + count;
  const detail::CodePointRange* it =
      std::upper_bound(ranges, end, c, [](char32_t v, const detail::CodePointRange& r) { return v < r.first; });
  return it != ranges && c <= (it - 1)->last;
}

}  // namespace

CharClass classify(char32_t c) noexcept {
  if (c < 128) return kAscii[c];
  if (in_ranges(detail::kLetterRanges, detail::kLetterRanges_count, c)) return CharClass::letter;
  if (in_ranges(detail::kNumberRanges, detail::kNumberRanges_count, c)) return CharClass::number;
  if (is_white_space(c)) return CharClass::space;
  return CharClass::other;
}

bool is_mark(char32_t c) noexcept {
  return c >= 0x300 && in_ranges(detail::kMarkRanges, detail::kMarkRanges_count, c);  // none below U+0300
}

std::size_t utf8_sequence_length(unsigned char lead) noexcept {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;  // continuation byte or overlong 2-byte lead
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

std::size_t decode_utf8(std::string_view text, std::size_t at, char32_t& code_point) noexcept {
  AK_DEBUG_ASSERT(at < text.size(), "decode_utf8: position past the end");
  const auto lead = static_cast<unsigned char>(text[at]);
  const std::size_t length = utf8_sequence_length(lead);
  code_point = kReplacementCharacter;
  if (length == 1) {
    code_point = lead;
    return 1;
  }
  if (length == 0) return 1;
  // The second byte's range excludes overlong forms, surrogates and values past
  // U+10FFFF (Unicode Table 3-7); later bytes are plain continuation bytes.
  unsigned second_low = 0x80;
  unsigned second_high = 0xBF;
  if (lead == 0xE0) second_low = 0xA0;
  if (lead == 0xED) second_high = 0x9F;
  if (lead == 0xF0) second_low = 0x90;
  if (lead == 0xF4) second_high = 0x8F;
  char32_t c = lead & (0x7F >> length);
  for (std::size_t i = 1; i < length; ++i) {
    if (at + i >= text.size()) return i;  // truncated: the maximal subpart so far is one U+FFFD
    const auto byte = static_cast<unsigned char>(text[at + i]);
    const unsigned low = i == 1 ? second_low : 0x80;
    const unsigned high = i == 1 ? second_high : 0xBF;
    if (byte < low || byte > high) return i;
    c = (c << 6) | (byte & 0x3F);
  }
  code_point = c;
  return length;
}

std::size_t encode_utf8(char32_t c, char* out) noexcept {
  AK_ASSERT(c < 0x110000, "encode_utf8: not a code point");
  if (c < 0x80) {
    out[0] = static_cast<char>(c);
    return 1;
  }
  if (c < 0x800) {
    out[0] = static_cast<char>(0xC0 | (c >> 6));
    out[1] = static_cast<char>(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = static_cast<char>(0xE0 | (c >> 12));
    out[1] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out[2] = static_cast<char>(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = static_cast<char>(0xF0 | (c >> 18));
  out[1] = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
  out[2] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
  out[3] = static_cast<char>(0x80 | (c & 0x3F));
  return 4;
}

}  // namespace activekv::tokenizer
