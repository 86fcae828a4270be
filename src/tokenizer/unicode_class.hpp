// unicode_class.hpp — the character classes the GPT-2 pre-tokenizer pattern tests,
// and a forgiving UTF-8 decoder.
//
// The pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// only ever asks which of four classes a code point is in, so that is all this
// file answers: letter (\p{L}), number (\p{N}), space (\s) or other. Letters and
// numbers come from tables generated once from the Unicode database
// (gen_unicode_tables.py -> unicode_tables.cpp, committed); white space is the
// Unicode White_Space property, which is what Oniguruma's \s matches (checked
// against the `tokenizers` package: U+0085 and U+3000 are space, U+001C, U+180E
// and U+200B are not).
//
// Decoding never fails: bytes that are not well-formed UTF-8 (overlong forms,
// surrogates and values past U+10FFFF included) decode as U+FFFD, class other. The tokenizer works on the original bytes, so such
// input still round-trips byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace activekv::tokenizer {

enum class CharClass : std::uint8_t { letter, number, space, other };

CharClass classify(char32_t code_point) noexcept;
// \p{M} (general categories Mn Mc Me): class other to classify(); Qwen3.5's pattern joins marks to
// letters ([\p{L}\p{M}]+).
bool is_mark(char32_t code_point) noexcept;

inline constexpr char32_t kReplacementCharacter = 0xFFFD;

// Decodes the code point starting at text[at] (at < text.size()). Returns its
// length in bytes (1 to 4) and writes the code point. Where the bytes are not
// well-formed it writes U+FFFD and returns the length of the maximal subpart
// (Unicode's recommended practice, and what Rust's from_utf8_lossy replaces
// with one U+FFFD): 1 for a stray byte, 2 for "\xE4\xB8" cut short.
std::size_t decode_utf8(std::string_view text, std::size_t at, char32_t& code_point) noexcept;

// Length of the well-formed UTF-8 sequence that begins with `lead`, from the lead
// byte alone: 1 to 4, or 0 for a byte that cannot begin one.
std::size_t utf8_sequence_length(unsigned char lead) noexcept;

// Appends the UTF-8 encoding of `code_point` (< 0x110000) to out; returns bytes written (1 to 4).
std::size_t encode_utf8(char32_t code_point, char* out) noexcept;

namespace detail {
struct CodePointRange {
  char32_t first;  // inclusive
  char32_t last;   // inclusive
};
extern const CodePointRange kLetterRanges[];
extern const std::size_t kLetterRanges_count;
extern const CodePointRange kNumberRanges[];
extern const std::size_t kNumberRanges_count;
extern const CodePointRange kMarkRanges[];
extern const std::size_t kMarkRanges_count;
}  // namespace detail

}  // namespace activekv::tokenizer
