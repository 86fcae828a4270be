// input_file.hpp — reading a small input file (a configuration, a trace) that a
// flag names, within a size limit.
//
// What it owns: the checks made before a byte is read. The invariant: the text
// returned is from a regular file no larger than the limit; a directory, a
// device (/dev/zero), a FIFO, a missing file or one past the limit is an Error
// whose setting is the flag ("--config") and whose message names the path and
// what is wrong — never "not valid JSON" or "holds no requests".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "activekv/result.hpp"

namespace activekv::serve {

inline constexpr std::uint64_t config_file_bytes_max = std::uint64_t{1} << 20;  // 1 MiB
inline constexpr std::uint64_t trace_file_bytes_max = std::uint64_t{1} << 30;   // 1 GiB

Result<std::string> read_input_file(const std::string& path, std::uint64_t bytes_max, std::string_view flag);

}  // namespace activekv::serve
