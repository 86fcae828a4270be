// byte_level.cpp — the GPT-2 byte map (see byte_level.hpp), built at compile time.
#include "tokenizer/byte_level.hpp"

#include <array>

#include "tokenizer/unicode_class.hpp"

namespace activekv::tokenizer {
namespace {

constexpr bool maps_to_itself(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

constexpr std::array<char32_t, 256> make_forward() {
  std::array<char32_t, 256> forward{};
  char32_t next = 256;
  for (unsigned b = 0; b < 256; ++b) forward[b] = maps_to_itself(b) ? b : next++;
  return forward;
}
constexpr std::array<char32_t, 256> kForward = make_forward();
constexpr char32_t kLimit = 256 + 68;  // every mapped code point is below this
static_assert(make_forward()[' '] == 0x120, "space is Ġ");
static_assert(make_forward()['\n'] == 0x10A, "newline is Ċ");
static_assert(make_forward()[173] == kLimit - 1, "the 68 non-printable bytes map to U+0100..U+0143");

constexpr std::array<std::int16_t, kLimit> make_backward() {
  std::array<std::int16_t, kLimit> backward{};
  for (auto& v : backward) v = -1;
  for (unsigned b = 0; b < 256; ++b) backward[make_forward()[b]] = static_cast<std::int16_t>(b);
  return backward;
}
constexpr std::array<std::int16_t, kLimit> kBackward = make_backward();

}  // namespace

char32_t byte_to_code_point(std::uint8_t byte) noexcept { return kForward[byte]; }

int code_point_to_byte(char32_t code_point) noexcept {
  return code_point < kLimit ? kBackward[code_point] : -1;
}

void append_byte_level(std::uint8_t byte, std::string& out) {
  char buffer[4];
  const std::size_t n = encode_utf8(kForward[byte], buffer);
  out.append(buffer, n);
}

bool decode_byte_level(std::string_view token_text, std::string& out) {
  const std::size_t mark = out.size();
  for (std::size_t at = 0; at < token_text.size();) {
    char32_t c = 0;
    at += decode_utf8(token_text, at, c);
    const int byte = code_point_to_byte(c);
    if (byte < 0) {
      out.resize(mark);
      return false;
    }
    out.push_back(static_cast<char>(byte));
  }
  return true;
}

}  // namespace activekv::tokenizer
