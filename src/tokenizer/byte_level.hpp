// byte_level.hpp — GPT-2's reversible map between bytes and printable code points.
//
// Byte-level BPE vocabularies never contain raw bytes: every byte b is written as
// a printable character so that tokens are valid text. Bytes that are already
// printable and not space (33..126, 161..172, 174..255) map to themselves; the 68
// others (0..32, 127..160, 173) map, in order, to U+0100..U+0143 — so a space is
// "Ġ" (U+0120) and a newline "Ċ" (U+010A). The map is a bijection between the
// 256 bytes and 256 code points below U+0144; that is the invariant decoding
// relies on.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace activekv::tokenizer {

char32_t byte_to_code_point(std::uint8_t byte) noexcept;
// The byte a code point stands for, or -1 if it is not one of the 256.
int code_point_to_byte(char32_t code_point) noexcept;

// Appends the UTF-8 of byte's code point (1 or 2 bytes) to out.
void append_byte_level(std::uint8_t byte, std::string& out);

// Appends the bytes a byte-level token text stands for. Returns false, leaving
// `out` unchanged, when some character is not in the map (an added token such as
// "<|im_start|>" written as plain text) — the caller then uses the text as is.
bool decode_byte_level(std::string_view token_text, std::string& out);

}  // namespace activekv::tokenizer
