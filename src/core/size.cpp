// size.cpp — parsing and printing byte sizes with binary units.
#include "activekv/size.hpp"

#include <array>
#include <cctype>
#include <cstdio>
#include <limits>

namespace activekv {

namespace {

__extension__ typedef unsigned __int128 u128;  // fraction × multiplier needs 70 bits

struct Unit {
  std::string_view name;
  std::uint64_t multiplier;
};

constexpr std::array<Unit, 13> units{{
    {"", 1}, {"b", 1},
    {"k", KiB}, {"kb", KiB}, {"kib", KiB},
    {"m", MiB}, {"mb", MiB}, {"mib", MiB},
    {"g", GiB}, {"gb", GiB}, {"gib", GiB},
    {"t", TiB}, {"tib", TiB},
}};

// "'text" + tail, appended piece by piece (GCC 12 misreads a chained operator+ here: -Wrestrict).
std::string quoted(std::string_view text, const char* tail) {
  std::string message;
  message += '\'';
  message += text;
  message += tail;
  return message;
}

Error size_error(std::string_view setting, std::string_view text, const char* why) {
  std::string message = quoted(text, "' ");
  message += why;
  message += ": give a byte count such as 768, 48KiB, 512MiB or 12GiB";
  return make_error(ErrorCode::invalid_argument, std::string(setting), std::move(message));
}

}  // namespace

Result<std::uint64_t> parse_size(std::string_view text, std::string_view setting, bool zero_allowed) {
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i == text.size()) return size_error(setting, text, "is empty");
  if (text[i] == '-' || text[i] == '+') return size_error(setting, text, "has a sign");
  if (!std::isdigit(static_cast<unsigned char>(text[i]))) return size_error(setting, text, "is not a size");

  std::uint64_t whole = 0;
  constexpr std::uint64_t max = (std::numeric_limits<std::uint64_t>::max)();
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const std::uint64_t digit = static_cast<std::uint64_t>(text[i] - '0');
    if (whole > (max - digit) / 10) return size_error(setting, text, "overflows 64 bits");
    whole = whole * 10 + digit;
  }
  // Fraction: up to 9 decimal digits, kept exactly as numerator / 10^digits.
  std::uint64_t fraction = 0;
  std::uint64_t fraction_scale = 1;
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (i == text.size() || !std::isdigit(static_cast<unsigned char>(text[i]))) {
      return size_error(setting, text, "has a decimal point without digits after it");
    }
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (fraction_scale >= 1'000'000'000ull) return size_error(setting, text, "has too many decimals");
      fraction = fraction * 10 + static_cast<std::uint64_t>(text[i] - '0');
      fraction_scale *= 10;
    }
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))));
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();

  std::uint64_t multiplier = 0;
  for (const Unit& u : units) {
    if (u.name == unit) multiplier = u.multiplier;
  }
  if (multiplier == 0) return size_error(setting, text, "has an unknown unit (use B, KiB, MiB, GiB or TiB)");
  if (whole > max / multiplier) return size_error(setting, text, "overflows 64 bits");
  std::uint64_t bytes = whole * multiplier;
  if (fraction != 0) {
    // fraction × multiplier / scale must be a whole number of bytes.
    const u128 part = static_cast<u128>(fraction) * multiplier;
    if (part % fraction_scale != 0) return size_error(setting, text, "is not a whole number of bytes");
    const std::uint64_t extra = static_cast<std::uint64_t>(part / fraction_scale);
    if (bytes > max - extra) return size_error(setting, text, "overflows 64 bits");
    bytes += extra;
  }
  if (bytes == 0 && !zero_allowed) return size_error(setting, text, "is zero");
  return bytes;
}

Result<std::uint64_t> parse_count(std::string_view text, std::string_view setting) {
  if (text.empty()) return make_error(ErrorCode::invalid_argument, std::string(setting), "is empty: give a whole number");
  std::uint64_t value = 0;
  constexpr std::uint64_t max = (std::numeric_limits<std::uint64_t>::max)();
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return make_error(ErrorCode::invalid_argument, std::string(setting), quoted(text, "' is not a whole non-negative number"));
    }
    const std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
    if (value > (max - digit) / 10) {
      return make_error(ErrorCode::invalid_argument, std::string(setting), quoted(text, "' overflows 64 bits"));
    }
    value = value * 10 + digit;
  }
  return value;
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::array<std::pair<std::uint64_t, const char*>, 4> scales{{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}}};
  char buffer[64];
  for (const auto& [scale, name] : scales) {
    if (bytes >= scale) {
      if (bytes % scale == 0) {
        std::snprintf(buffer, sizeof buffer, "%llu %s", static_cast<unsigned long long>(bytes / scale), name);
      } else {
        std::snprintf(buffer, sizeof buffer, "%.2f %s", static_cast<double>(bytes) / static_cast<double>(scale), name);
      }
      return buffer;
    }
  }
  std::snprintf(buffer, sizeof buffer, "%llu B", static_cast<unsigned long long>(bytes));
  return buffer;
}

}  // namespace activekv
