// size.hpp — byte sizes as people write them, and back.
//
// parse_size accepts a plain count ("768") or a count with a binary unit
// ("48KiB", "12GiB", "1.5GiB"; K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB, all ×1024,
// case-insensitive, optional space). It refuses, naming the setting: an empty
// text, a sign, a zero when zero_allowed is false, anything that is not a number
// and a unit, a fraction of a byte, and a value that overflows 64 bits.
// "auto" is refused by the callers that take sizes, with their own reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "activekv/result.hpp"

namespace activekv {

inline constexpr std::uint64_t KiB = 1024ull;
inline constexpr std::uint64_t MiB = 1024ull * KiB;
inline constexpr std::uint64_t GiB = 1024ull * MiB;
inline constexpr std::uint64_t TiB = 1024ull * GiB;

Result<std::uint64_t> parse_size(std::string_view text, std::string_view setting, bool zero_allowed = false);

// Parses a plain non-negative integer count ("32", "32768"), refusing signs, units and overflow.
Result<std::uint64_t> parse_count(std::string_view text, std::string_view setting);

// "128 MiB", "2 GiB", "1.5 GiB", "768 B": exact where the value is a whole multiple,
// else with one or two decimals.
std::string format_bytes(std::uint64_t bytes);

}  // namespace activekv
